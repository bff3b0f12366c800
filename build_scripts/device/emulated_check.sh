#!/usr/bin/env bash
# hexrag on emulated aarch64 Linux: a Debian arm64 root filesystem run through qemu-user, the project
# pip-installed in it with the versions pinned here, then
#   1. `hexrag generate` greedy tokens equal to this machine's for 32 steps,
#   2. `hexrag ask` answering from the sample KB,
#   3. `--backend htp` refused in one line (no Snapdragon SoC under emulation).
# Not part of the test suite: it takes tens of minutes. Needs root and Debian's qemu-user-static,
# binfmt-support and debootstrap packages (apt-get install qemu-user-static binfmt-support debootstrap).
#
#   build_scripts/device/emulated_check.sh LLM_DIR EMBEDDER_DIR [WORK_DIR]
#
# LLM_DIR / EMBEDDER_DIR: CPU builds, e.g. the float SmolLM2 (`hexrag build llm --weights
# smollm2-135m-instruct`) and the MiniLM embedder. An int4 build's MatMulNBits nodes run CPU-specific
# int8-activation kernels, so its tokens may part from x86's early (docs/device.md). WORK_DIR (default /var/tmp/hexrag-arm64) keeps the root filesystem between runs.
set -euo pipefail

LLM=$(realpath "$1"); EMB=$(realpath "$2"); WORK=${3:-/var/tmp/hexrag-arm64}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
ROOT=$WORK/rootfs
STEPS=32
PROMPT="The history of the bicycle begins"
QUESTION="How long does fast charging take?"
RESULTS=$WORK/results.txt
NICE=(nice -n 10)  # the machine is shared: emulation yields to everything else

mkdir -p "$WORK"
: > "$RESULTS"
say() { echo "$*" | tee -a "$RESULTS"; }
host() { PYTHONPATH="$REPO" HEXRAG_THREADS=1 "${NICE[@]}" python -m app.cli "$@"; }
# inside: a clean environment; the project tree copied below comes first on the path, so a rerun
# checks the current code without reinstalling it
arm() { "${NICE[@]}" chroot "$ROOT" env -i HEXRAG_THREADS=1 HOME=/root LANG=C.UTF-8 PYTHONPATH=/opt/hexrag \
          PATH=/opt/venv/bin:/usr/bin:/bin "$@"; }

# the kernel runs aarch64 binaries through qemu (binfmt_misc; the F flag lets a chroot use it)
[ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64

if [ ! -x "$ROOT/usr/bin/python3" ]; then
  t0=$SECONDS
  "${NICE[@]}" debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$ROOT" http://deb.debian.org/debian > "$WORK/debootstrap.log"
  say "arm64 root filesystem (debootstrap, Debian 12): $((SECONDS - t0)) s"
fi
mountpoint -q "$ROOT/proc" || mount -t proc proc "$ROOT/proc"
mountpoint -q "$ROOT/dev" || mount --bind /dev "$ROOT/dev"
# no /sys: under qemu-user it (and /proc/cpuinfo) describes the x86 host, and ONNX Runtime's CPU
# feature detection then picks kernels that crash the emulator (measured); without it ONNX Runtime
# says it cannot read the CPU's features and keeps to its baseline aarch64 kernels
trap 'umount "$ROOT/proc" "$ROOT/dev" 2>/dev/null || true' EXIT
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"  # the same trust as pip here
say "arm64 CPU as emulated: $(arm uname -m), $(arm python3 --version)"

# the project and its dependencies, pinned to the versions installed here (what a bundle pins)
rm -rf "$ROOT/opt/hexrag" && mkdir -p "$ROOT/opt/hexrag"
git -C "$REPO" ls-files -z | (cd "$REPO" && xargs -0 tar cf -) | tar xf - -C "$ROOT/opt/hexrag"
PYTHONPATH="$REPO" python -c "from app.bundle import requirements; print(requirements(), end='')" \
  > "$ROOT/opt/requirements.txt"
if [ ! -x "$ROOT/opt/venv/bin/hexrag" ]; then
  t0=$SECONDS
  arm python3 -m venv /opt/venv
  arm /opt/venv/bin/pip install -q --cert /etc/ssl/certs/ca-certificates.crt -r /opt/requirements.txt
  arm /opt/venv/bin/pip install -q --cert /etc/ssl/certs/ca-certificates.crt --no-deps /opt/hexrag
  say "pip install of the pinned requirements + hexrag under emulation: $((SECONDS - t0)) s"
fi
say "installed: $(arm /opt/venv/bin/pip freeze | grep -iE '^(onnxruntime|onnxruntime-qnn|numpy|faiss-cpu)==' | tr '\n' ' ')"

# the models and a KB of the samples embedded here (so both sides read the same index)
rm -rf "$ROOT/data" && mkdir -p "$ROOT/data"
cp -r "$LLM" "$ROOT/data/llm" && cp -r "$EMB" "$ROOT/data/embedder"
rm -rf "$WORK/kb"
host ingest "$REPO/knowledge/samples/aurora_faq.jsonl" "$REPO/knowledge/samples/aurora_manual.md" \
  --kb "$WORK/kb" --embedder "$EMB" --quiet > /dev/null
cp -r "$WORK/kb" "$ROOT/data/kb"

# 1. greedy tokens
host generate --model "$LLM" --prompt "$PROMPT" --max-tokens $STEPS --json > "$WORK/x86.json"
t0=$SECONDS
arm python -m app.cli generate --model /data/llm --prompt "$PROMPT" --max-tokens $STEPS --json > "$WORK/arm64.json"
say "generate under emulation: $((SECONDS - t0)) s"
python - "$WORK/x86.json" "$WORK/arm64.json" <<'EOF' | tee -a "$RESULTS"
import json, sys
x86, arm = (json.load(open(p)) for p in sys.argv[1:3])
same = next((i for i, (a, b) in enumerate(zip(x86["token_ids"], arm["token_ids"])) if a != b), None)
print(f"greedy tokens: x86 {len(x86['token_ids'])}, arm64 {len(arm['token_ids'])}, "
      + ("identical" if x86["token_ids"] == arm["token_ids"] else f"first difference at step {same}"))
print(f"arm64 text: {arm['text']!r}")
print(f"arm64 decode under emulation: {arm['timings']['decode_tok_s']} tok/s")
if x86["token_ids"] != arm["token_ids"]:
    sys.exit(1)
EOF

# 2. an answer from the sample KB
host ask "$QUESTION" --llm "$LLM" --embedder "$EMB" --kb "$WORK/kb" --json 2>/dev/null > "$WORK/ask-x86.json"
t0=$SECONDS
arm python -m app.cli ask "$QUESTION" --llm /data/llm --embedder /data/embedder --kb /data/kb --json > "$WORK/ask-arm64.json"
say "ask under emulation: $((SECONDS - t0)) s"
python - "$WORK/ask-x86.json" "$WORK/ask-arm64.json" <<'EOF' | tee -a "$RESULTS"
import json, sys
x86, arm = (json.load(open(p)) for p in sys.argv[1:3])
print(f"ask arm64: {arm['grounding']['decision']}: {arm['answer']!r} (citations: "
      f"{', '.join(c['source'].rsplit('/', 1)[-1] for c in arm['citations'])})")
print("ask: same answer as x86" if arm["answer"] == x86["answer"] else f"ask x86 answered: {x86['answer']!r}")
if not arm["citations"]:
    sys.exit(1)
EOF

# 3. the NPU asked for where there is none: one line, exit 1 (leaving out what ONNX Runtime itself
# prints at import under qemu about the CPU features it cannot read)
ours() { grep -v -e cpuinfo -e "^onnxruntime "; }
set +e
gen_err=$(arm python -m app.cli generate --model /data/llm --prompt hi --backend htp 2>&1 >/dev/null); gen_rc=$?
ask_err=$(arm python -m app.cli ask "$QUESTION" --llm /data/llm --embedder /data/embedder --kb /data/kb --backend htp \
          2>&1 >/dev/null); ask_rc=$?
set -e
gen_err=$(echo "$gen_err" | ours); ask_err=$(echo "$ask_err" | ours)
say "generate --backend htp: exit $gen_rc, $(echo "$gen_err" | wc -l) line: $gen_err"
say "ask --backend htp: exit $ask_rc, $(echo "$ask_err" | wc -l) line: $ask_err"
if [ "$gen_rc" != 1 ] || [ "$ask_rc" != 1 ] || [ "$(echo "$gen_err" | wc -l)" != 1 ] || [ "$(echo "$ask_err" | wc -l)" != 1 ]; then
  say "FAIL: --backend htp must fail with one line"; exit 1
fi
arm python -m app.cli device --model /data/llm | sed 's/^/device: /' | tee -a "$RESULTS"
