"""dawnscope's measuring core: config -> providers -> correctness -> timing -> work counting ->
ceilings -> result rows -> reports. See README.md and ../shared/DESIGN.md."""
