"""The bottom layer: errors, number formats, shapes, one spec per op family, config, device and fingerprint, result
rows and files, JSON input, work counting, statistics, datasheet matching, kernel names."""
