import json,subprocess,sys,tempfile,glob,collections
home=tempfile.mkdtemp()
files=sys.argv[1:] or glob.glob('tests/fixtures/messages/*.jsonl')
tot=collections.Counter(); out=[]
for f in files:
    for i,l in enumerate(open(f)):
        e=json.loads(l)
        r=subprocess.run(['target/release/llm-oom','explain','-','--json'],input=e['rendered'],capture_output=True,text=True,env={'HOME':home,'PATH':'/usr/bin:/bin'})
        try: v=json.loads(r.stdout)['verdict']['cause']
        except Exception: v='?'
        got_oom = v!='none'
        k = 'ok' if v==e['cause'] else ('OOM->none' if e['oom'] and not got_oom else ('look->oom' if not e['oom'] and got_oom else 'cause'))
        tot[(f.split('/')[-1],k)]+=1
        if k!='ok': out.append((f.split('/')[-1],i,k,e['engine'],e['cause'],v,e['rendered'][:230].replace('\n',' | ')))
for k in sorted(tot): print(k,tot[k])
for o in out: print(*o, sep='\t')
