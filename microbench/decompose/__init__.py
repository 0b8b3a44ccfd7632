"""The decompose command's library: a model's training step recorded, profiled, attributed to layers and replayed
(pipeline.py). `dawnscope decompose`: cli.py."""
