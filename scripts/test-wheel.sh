#!/usr/bin/env bash
# Build the `llm-oom` wheel with maturin, install it into a fresh venv the way a user would
# (`pip install llm-oom`), and run the installed command: --version, a plan, an explain.
# Prints the wheel's size and the installed command's size. Used by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 -m venv "$WORK/build"
"$WORK/build/bin/pip" install -q --disable-pip-version-check "maturin>=1.5,<2"
"$WORK/build/bin/maturin" build --release --quiet -o "$WORK/wheels" 2>&1 | tail -n 2
WHEEL=$(ls "$WORK"/wheels/llm_oom-*.whl)
python3 -m venv "$WORK/user"
"$WORK/user/bin/pip" install -q --disable-pip-version-check "$WHEEL"
CMD="$WORK/user/bin/llm-oom"
echo "wheel: $(basename "$WHEEL"), $(du -k "$WHEEL" | cut -f1) KiB; installed command: $(du -k "$CMD" | cut -f1) KiB"
"$CMD" --version
# plan's exit code is its verdict (0 fits, 1 would run out); 2 and above would be a failure.
rc=0
"$CMD" plan --model mistralai/Mistral-7B-Instruct-v0.2 --vram 24GB -p 8000 -n 1000 -b 4 > "$WORK/plan.txt" || rc=$?
head -n 3 "$WORK/plan.txt"
[ "$rc" -le 1 ] || { echo "plan from the wheel exited $rc" >&2; exit 1; }
rc=0
echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.52 GiB of which 1.00 GiB is free.' |
  "$CMD" explain - --json > "$WORK/explain.json" || rc=$?
[ "$rc" -eq 1 ] || { echo "explain from the wheel exited $rc, not 1" >&2; exit 1; }
grep -q '"command": "explain"' "$WORK/explain.json"
echo "the installed llm-oom runs"
