# Model files: safetensors headers that lie, a checkpoint that is not its config's model, an index
# without its shards, zero GGUF fields, a broken symlink, odd dtypes and bits, near-name presets,
# Python's Infinity in config.json. Sourced by scripts/hostile-inputs.sh ($ROOT, $T, group, row).

M="$T/model"
mkdir -p "$M"
python3 - "$ROOT" "$M" <<'EOF'
import json, os, struct, sys
ROOT, M = sys.argv[1], sys.argv[2]
mistral = open(os.path.join(ROOT, 'presets/mistral-7b-instruct-v0.2.json')).read()
tiny = json.load(open(os.path.join(ROOT, 'tests/fixtures/tiny-llama/config.json')))

def folder(name, config=mistral):
    d = os.path.join(M, name)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, 'config.json'), 'w').write(config if isinstance(config, str) else json.dumps(config))
    return d

def st(name, header, data):
    h = json.dumps(header).encode()
    open(os.path.join(folder(name), 'model.safetensors'), 'wb').write(struct.pack('<Q', len(h)) + h + b'\0' * data)

st('one-tensor', {'w': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]}}, 8)
st('past-end', {'w': {'dtype': 'U8', 'shape': [2**63], 'data_offsets': [0, 2**63]}}, 8)
st('backwards', {'w': {'dtype': 'U8', 'shape': [0], 'data_offsets': [8, 0]}}, 8)
st('overlap', {'v': {'dtype': 'F32', 'shape': [2], 'data_offsets': [0, 8]},
               'w': {'dtype': 'F32', 'shape': [2], 'data_offsets': [4, 12]}}, 12)
st('missized', {'w': {'dtype': 'BF16', 'shape': [4096, 4096], 'data_offsets': [0, 8]}}, 8)
d = folder('index-only')
open(os.path.join(d, 'model.safetensors.index.json'), 'w').write(json.dumps(
    {'weight_map': {'a': 'model-00001-of-00002.safetensors', 'b': 'model-00002-of-00002.safetensors'}}))
folder('float12', dict(tiny, torch_dtype='float12'))
for b in (0, 1, 17):
    folder(f'gptq-bits-{b}', dict(tiny, quantization_config={'quant_method': 'gptq', 'bits': b}))
folder('awq-bits-3', dict(tiny, quantization_config={'quant_method': 'awq', 'bits': 3}))
mamba = open(os.path.join(ROOT, 'presets/mamba-codestral-7b-v0.1.json')).read().rstrip().rstrip('}')
folder('python-infinity', mamba + ', "time_step_limit": [0.0, Infinity]}')

def s(x): b = x.encode(); return struct.pack('<Q', len(b)) + b
meta = [('llama.block_count', 2), ('llama.embedding_length', 64), ('llama.feed_forward_length', 128),
        ('llama.attention.head_count', 4), ('llama.vocab_size', 100)]
def gguf(name, meta):
    b = b'GGUF' + struct.pack('<I', 3) + struct.pack('<Q', 0) + struct.pack('<Q', len(meta) + 1)
    b += s('general.architecture') + struct.pack('<I', 8) + s('llama')
    for k, v in meta: b += s(k) + struct.pack('<I', 4) + struct.pack('<I', v)
    open(os.path.join(M, name), 'wb').write(b)
gguf('embedding-0.gguf', [(k, 0 if k == 'llama.embedding_length' else v) for k, v in meta])
gguf('layers-0.gguf', [(k, 0 if k == 'llama.block_count' else v) for k, v in meta])
EOF
ln -s "$M/gone" "$M/dangling"

group "Model files and checkpoints"
row "2" "Mistral-7B config.json beside a model.safetensors of one 8-byte tensor" -- plan --model "$M/one-tensor" --vram 24GiB
row "2" "the same, its config.json passed as the file" -- plan --model "$M/one-tensor/config.json" --vram 24GiB
row "2" "safetensors data_offsets [0, 2^63] in a 200-byte file" -- plan --model "$M/past-end" --vram 24GiB
row "2" "safetensors data_offsets [8, 0] (end before start)" -- plan --model "$M/backwards" --vram 24GiB
row "2" "safetensors tensors whose byte ranges overlap" -- plan --model "$M/overlap" --vram 24GiB
row "2" "safetensors BF16 4096x4096 in 8 bytes" -- plan --model "$M/missized" --vram 24GiB
row "0 1" "an index whose shards are not in the folder (a note says so)" -- plan --model "$M/index-only" --vram 24GiB
row "2" "GGUF llama.embedding_length = 0" -- plan --model "$M/embedding-0.gguf" --vram 24GiB
row "2" "GGUF llama.block_count = 0" -- plan --model "$M/layers-0.gguf" --vram 24GiB
row "2" "--model a broken symlink" -- plan --model "$M/dangling" --vram 24GiB
row "0" "torch_dtype float12 (a note: sized as bf16)" -- plan --model "$M/float12" --vram 24GiB
row "2" "GPTQ bits 0" -- plan --model "$M/gptq-bits-0" --vram 24GiB
row "2" "GPTQ bits 1" -- plan --model "$M/gptq-bits-1" --vram 24GiB
row "2" "GPTQ bits 17" -- plan --model "$M/gptq-bits-17" --vram 24GiB
row "0" "AWQ bits 3" -- plan --model "$M/awq-bits-3" --vram 24GiB
row "0 1" "meta-llama/Llama-3.1-70B-Instruct (the 3.3 preset, with a note)" -- plan --model meta-llama/Llama-3.1-70B-Instruct --vram 24GiB
row "0 1" "a Mamba config.json with time_step_limit [0.0, Infinity]" -- plan --model "$M/python-infinity" --vram 24GiB
