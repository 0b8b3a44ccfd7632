"""`dawnscope verify`: each finding of a model's step whose fix can be applied, checked against the saving the fix
really brings (verify.py), measured in alternating blocks in separate processes (pair.py), the fixes by finding
(fixes.py, data/verify.toml)."""
