"""Developer tooling, apart from the user commands: the GPU machine check (`python -m devtools.devicecheck`,
run by scripts/device-check), its environment probe (`python -m devtools.probe`) and the Triton compile
count of a profile (`python -m devtools.compiles`)."""
