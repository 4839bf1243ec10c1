import json,os,subprocess,sys,tempfile,collections
# usage (from the repository root, after cargo build --release):
#   python3 scripts/score-set.py SET COMMIT OUT.jsonl  -- appends each verdict, prints totals only
#   (LLM_OOM_BIN picks another build of the binary, e.g. target/debug/llm-oom)
bin=os.environ.get('LLM_OOM_BIN','target/release/llm-oom')
s,commit,out=sys.argv[1:4]
d=f'tests/fixtures/logs/{s}'
m=json.load(open(f'{d}/manifest.json'))
home=tempfile.mkdtemp()
right=n=none=look=0
rows=[]
for e in m:
    r=subprocess.run([bin,'explain',f"{d}/{e['file']}",'--json'],capture_output=True,text=True,env={'HOME':home,'PATH':'/usr/bin:/bin'})
    try: j=json.loads(r.stdout); v=j['verdict']['cause']; c=j['verdict'].get('confidence')
    except Exception: v='?'; c=None
    n+=1; right+= v==e['cause']
    none+= e['oom'] and v=='none'; look+= (not e['oom']) and v!='none'
    rows.append({"set":s,"file":e['file'],"commit":commit,"label":e['cause'],"oom":e['oom'],"verdict":v,"confidence":c,"exit":r.returncode})
with open(out,'a') as f:
    for x in rows: f.write(json.dumps(x)+"\n")
print(f"{s}: {right}/{n} right ({100*right/n:.1f} %), {none} OOM(s) called none, {look} look-alike(s) called an OOM")
