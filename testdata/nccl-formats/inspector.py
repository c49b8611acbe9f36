#!/usr/bin/env python3
"""Build inspector.tsv: the census of the JSON records NCCL's Inspector
profiler plugin writes, read from its source at every tag that has it
(ext-profiler/inspector, later plugins/profiler/inspector). The writer
builds a record with calls of json.cc (jsonStartObject, jsonKey, jsonStr,
jsonInt, jsonUint64, jsonDouble, ...); each writer function is rendered here
as the text those calls print, with the printf conversions of json.cc in
place of the values ("%s" quoted for strings, %d, %lu, %lf), @name for a
call of another writer function and @?name for a call made only under a
condition (the verbose event traces). A list's element is shown once: the
writer repeats it (once per kernel channel). Format strings only, no code.

Usage: inspector.py GITDIR OUT.tsv   (GITDIR: a bare clone of NVIDIA/nccl)"""
import hashlib, json, re, subprocess, sys, os

# The C tokenizer of extract.py.
tok_re = re.compile(r'''
   (?P<comment>//[^\n]*|/\*.*?\*/)
 | (?P<str>"(?:\\.|[^"\\\n])*")
 | (?P<chr>'(?:\\.|[^'\\\n])*')
 | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
 | (?P<num>[0-9][0-9a-zA-Z_.]*)
 | (?P<ws>\s+)
 | (?P<op>.)''', re.S | re.X)

def tokens(src):
    src = src.replace('\\\n', '')
    return [(m.lastgroup, m.group(m.lastgroup)) for m in tok_re.finditer(src) if m.lastgroup not in ('comment', 'ws')]

VALUES = {'jsonStr': '"%s"', 'jsonBool': '"%s"', 'jsonInt': '%d', 'jsonUint32': '%u', 'jsonUint64': '%lu',
          'jsonSize_t': '%zu', 'jsonDouble': '%lf', 'jsonNull': 'null'}
KINDS = [('inspectorCommInfoHeader', 'inspector_header'), ('inspectorCommInfoMetaHeader', 'inspector_metadata'),
         ('inspectorCompletedCollVerbose', 'inspector_coll_verbose'), ('inspectorCompletedColl', 'inspector_coll'),
         ('inspectorCompletedP2pVerbose', 'inspector_p2p_verbose'), ('inspectorCompletedP2p', 'inspector_p2p'),
         ('inspectorCommInfoDump', 'inspector_record')]

def functions(toks):
    """(name, body tokens) of each top-level function definition."""
    out, depth, i = [], 0, 0
    while i < len(toks):
        v = toks[i][1]
        if v == '{':
            if depth == 0 and i > 0 and toks[i-1][1] == ')':
                # the name: the identifier before the matching '('
                j, d = i - 1, 0
                while j >= 0:
                    if toks[j][1] == ')': d += 1
                    elif toks[j][1] == '(':
                        d -= 1
                        if d == 0: break
                    j -= 1
                name = toks[j-1][1] if j > 0 else ''
                k, d = i, 0
                while k < len(toks):
                    if toks[k][1] == '{': d += 1
                    elif toks[k][1] == '}':
                        d -= 1
                        if d == 0: break
                    k += 1
                out.append((name, toks[i+1:k]))
                i = k + 1
                continue
            depth += 1
        elif v == '}':
            depth -= 1
        i += 1
    return out

def render(body, writers, member):
    """The text body's json calls print; member: called inside an object
    that already holds keys (its first key is preceded by a comma)."""
    out, st = [], ['SOME' if member else 'NONE']
    cond = []  # brace depths of if-blocks
    depth = 0
    def sep():
        top = st[-1]
        if top == 'LIST_EMPTY': st[-1] = 'LIST_SOME'
        elif top == 'LIST_SOME': out.append(',')
        elif top == 'KEY': st.pop()
    i = 0
    pending_if = False
    while i < len(body):
        k, v = body[i]
        if v == 'if':
            pending_if = True
        elif v == '{':
            depth += 1
            if pending_if: cond.append(depth); pending_if = False
        elif v == '}':
            if cond and cond[-1] == depth: cond.pop()
            depth -= 1
        elif v == ';':
            pending_if = False
        if k == 'id' and i + 1 < len(body) and body[i+1][1] == '(':
            if v == 'jsonStartObject':
                sep(); out.append('{'); st.append('EMPTY')
            elif v == 'jsonFinishObject':
                st.pop(); out.append('}')
            elif v == 'jsonStartList':
                sep(); out.append('['); st.append('LIST_EMPTY')
            elif v == 'jsonFinishList':
                st.pop(); out.append(']')
            elif v == 'jsonKey':
                name = body[i+4][1]
                if st[-1] == 'SOME': out.append(',')
                st[-1] = 'SOME'
                out.append(name + ':'); st.append('KEY')
            elif v in VALUES:
                sep(); out.append(VALUES[v])
            elif v == 'jsonNewline':
                out.append('\\n')
            elif v in writers:
                # A value after a key is always written (else the JSON
                # would break); a member call under a condition is optional.
                q = ''
                if st[-1] == 'KEY':
                    st.pop()
                elif cond or pending_if:
                    q = '?'
                out.append('@' + q + v)
        i += 1
    return ''.join(out)

def git(d, *a):
    return subprocess.run(['git', '--git-dir', d] + list(a), capture_output=True, text=True).stdout

def tagkey(t):
    return tuple(int(x) for x in re.findall(r'\d+', t))

def main():
    gitdir, out = sys.argv[1], sys.argv[2]
    tags = sorted([t for t in git(gitdir, 'tag').split() if t.startswith('v2.')], key=tagkey)
    rows = {}
    for tag in tags:
        for d in ('ext-profiler/inspector', 'plugins/profiler/inspector'):
            files = [f for f in git(gitdir, 'ls-tree', '--name-only', tag + ':' + d + '/').split()
                     if f in ('inspector.cc', 'inspector_json.cc')]
            for f in files:
                path = d + '/' + f
                fns = functions(tokens(git(gitdir, 'show', tag + ':' + path)))
                writers = {n for n, b in fns if any(t[1] == 'jsonKey' for t in b)}
                for name, body in fns:
                    if name not in writers:
                        continue
                    kind = next((k for p, k in KINDS if name.startswith(p)), None)
                    if kind is None:
                        continue
                    fmt = render(body, writers, kind.endswith('_verbose'))
                    h = hashlib.sha1(('nccl\0JSON\0' + name + '\0' + fmt).encode()).hexdigest()[:8]
                    r = rows.setdefault(kind + '-' + h, {'kind': kind, 'function': name, 'format': fmt,
                                                         'files': set(), 'tags': []})
                    r['files'].add(path)
                    if tag not in r['tags']:
                        r['tags'].append(tag)
    with open(out, 'w') as fh:
        fh.write('# id\tsource\tkind\tlevel\tfirst\tlast\treleases\tfiles\tfunction\tformat\n')
        for id_, r in sorted(rows.items(), key=lambda x: (x[1]['kind'], tagkey(x[1]['tags'][0]), x[0])):
            fh.write('\t'.join([id_, 'nccl', r['kind'], 'JSON', r['tags'][0], r['tags'][-1], str(len(r['tags'])),
                                ','.join(sorted(r['files'])), r['function'], r['format']]) + '\n')
    json.dump({k: r['tags'] for k, r in rows.items()}, open(out.replace('.tsv', '-tags.json'), 'w'), indent=0, sort_keys=True)

main()
