"""The artifact format shared by `build_scripts` (writer) and `runtime` (reader).

Model directories are build outputs (by default in the hexrag home, `$HEXRAG_HOME/models/<name>/`);
this package holds their schema (`manifest.py`), the graph I/O contract (`contract.py`) and where
hexrag's files live on this machine (`home.py`: models, KB, downloaded weights), which every layer
asks without importing another.
"""
