"""The artifact format shared by `build_scripts` (writer) and `runtime` (reader).

Model directories (`models/<name>/`) are build outputs and are git-ignored; this package holds
only their schema (`manifest.py`) and the graph I/O contract (`contract.py`).
"""
