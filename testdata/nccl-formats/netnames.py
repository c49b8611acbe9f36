#!/usr/bin/env python3
"""List the network names NCCL and its net plugins register (the name that
"Using network <name>" and "via NET/<name>/<dev>" print), per release.

Usage: netnames.py OUT.tsv SOURCE=GITDIR:PREFIXES:TAG,TAG,...  ..."""
import re, subprocess, sys

# The name is the first member of ncclNet_vN_t / ncclCollNet_vN_t; plugins
# write it as ".name = "IB"," or positionally as the first initialiser.
NET_STRUCT = re.compile(r'(?:ncclNet|ncclCollNet)(?:_v\d+)?(?:_t)?\s+\w+\s*=\s*\{\s*(?:\.name\s*=\s*)?"([^"]+)"')
DESIG = re.compile(r'\.name\s*=\s*"([^"]+)"')

def names(gitdir, prefixes, tag):
    git = ['git', '--git-dir', gitdir]
    files = subprocess.run(git + ['ls-tree', '-r', '--name-only', tag], capture_output=True, text=True, check=True).stdout.split()
    out = set()
    for f in files:
        if not f.startswith(prefixes) or not f.endswith(('.c', '.cc', '.cpp', '.cu', '.h')) or '/test' in f:
            continue
        src = subprocess.run(git + ['show', tag + ':' + f], capture_output=True, text=True, errors='replace').stdout
        if 'ncclNet' not in src and 'ncclCollNet' not in src:
            continue
        for m in NET_STRUCT.finditer(src):
            out.add((m.group(1), 'collnet' if 'CollNet' in src[m.start():m.start() + 40] else 'net'))
        # designated initialisers inside a plugin's ncclNet struct (aws-ofi-nccl)
        for m in DESIG.finditer(src):
            before = src[max(0, m.start() - 400):m.start()]
            if re.search(r'ncclNet_v\d+_t|ncclCollNet_v\d+_t|nccl_net_ofi|ncclNet_t', before):
                out.add((m.group(1), 'collnet' if 'CollNet' in before[before.rfind('ncclCollNet'):] and before.rfind('ncclCollNet') > before.rfind('ncclNet_') else 'net'))
    return out

def main():
    out, specs = sys.argv[1], sys.argv[2:]
    rows = {}
    for spec in specs:
        source, rest = spec.split('=', 1)
        gitdir, prefixes, tags = rest.split(':', 2)
        for tag in tags.split(','):
            for name, kind in names(gitdir, tuple(prefixes.split('+')), tag):
                rows.setdefault((source, kind, name), []).append(tag)
    with open(out, 'w') as fh:
        fh.write('# source\tkind\tname\tfirst\tlast\treleases\n')
        for (source, kind, name), tags in sorted(rows.items()):
            fh.write(f'{source}\t{kind}\t{name}\t{tags[0]}\t{tags[-1]}\t{len(tags)}\n')

main()
