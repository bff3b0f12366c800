"""`python -m app.bench.soak`: the `hexrag bench soak` command under its module's name. The
command (its flags) lives in the CLI module, which imports the runner; the runner imports no CLI."""

from app.cli_bench import bench_soak

bench_soak(prog_name="python -m app.bench.soak")
