# Devices that are not there, interpreters that cannot work, output paths that cannot be written,
# sizes without a unit, and the card names people type (sourced by scripts/hostile-inputs.sh).

# A --python that passes the sanity run (`-c`) but whose probe dies, or hangs, while starting.
cat >"$T/py-dies" <<'PY'
#!/bin/sh
if [ "$1" = "-c" ]; then exec python3 "$@"; fi
echo 'ImportError: no torch in this interpreter' >&2
exit 7
PY
cat >"$T/py-hangs" <<'PY'
#!/bin/sh
if [ "$1" = "-c" ]; then exec python3 "$@"; fi
exec sleep 600
PY
printf '#!/bin/sh\nexec sleep 600\n' >"$T/py-sleeps"
chmod +x "$T/py-dies" "$T/py-hangs" "$T/py-sleeps"

group "Hostile CLI: devices, interpreters, output paths, sizes, cards"
M="$ROOT/tests/fixtures/tiny-llama"
# without a GPU: refused before any work (on a GPU machine cuda runs and cuda:99 is past its GPUs)
row "0 1 2" "diagnose --device cuda" -- diagnose --model "$M" --device cuda
row "0 1 2" "diagnose --device gpu" -- diagnose --model "$M" --device gpu
row "0 1 2" "diagnose --device cuda:7 (fewer GPUs here)" -- diagnose --model "$M" --device cuda:7
row "2" "diagnose --device cuda:99" -- diagnose --model "$M" --device cuda:99
row "2" "diagnose --python /bin/false" -- diagnose --model "$M" --device cpu --python /bin/false
row "2" "diagnose --python /nonexistent/python3" -- diagnose --model "$M" --device cpu --python /nonexistent/python3
row "2" "diagnose --python / (a folder)" -- diagnose --model "$M" --device cpu --python /
row "2" "diagnose --python (a program that hangs)" -- diagnose --model "$M" --device cpu --python "$T/py-sleeps"
row "3" "diagnose --python (the probe exits 7 before greeting)" -- diagnose --model "$M" --device cpu --python "$T/py-dies"
row "3" "diagnose --python (the probe hangs) --stage-timeout 5" -- diagnose --model "$M" --device cpu --python "$T/py-hangs" --stage-timeout 5
row "2" "diagnose --svg /nonexistent/x.svg" -- diagnose --model "$M" --device cpu --engine candle --svg /nonexistent/x.svg
row "2" "diagnose --svg (a folder)" -- diagnose --model "$M" --device cpu --engine candle --svg "$T"
row "2" "plan --host-ram 64 (no unit)" -- plan --model llama-3.3-70b-instruct --vram 24GiB --host-ram 64
row "2" "plan --host-ram 64B" -- plan --model llama-3.3-70b-instruct --vram 24GiB --host-ram 64B
row "2" "plan --host-ram lots" -- plan --model llama-3.3-70b-instruct --vram 24GiB --host-ram lots
row "0 1" "plan --host-ram 64GiB" -- plan --model llama-3.3-70b-instruct --vram 24GiB --host-ram 64GiB
row "2" "diagnose --vram-limit 24 (no unit)" -- diagnose --model "$M" --device cpu --vram-limit 24
for card in rtx3060 rtx3060ti rtx3070 rtx3080ti rtx4060ti-16g rtx4070ti-super rtx5070 rtx5080 rtx4090-laptop "RTX 4060 Laptop GPU" "NVIDIA GeForce RTX 4090" "NVIDIA A100-SXM4-80GB" mi300x mi250x a10g l40s; do
    row "0 1" "plan --vram '$card'" -- plan --vram "$card"
done
row "2" "plan --vram nvidia-smi" -- plan --vram nvidia-smi
row "2" "plan --vram rtx9090" -- plan --vram rtx9090
row "2" "plan --vram 24XB" -- plan --vram 24XB
