#!/usr/bin/env python3
"""Extract the printf-style format strings of log calls from a bare git
repository at a list of tags. Output: JSON lines, one per distinct
(call, format), with the files and the tags that contain it.

Usage: [PREFIXES=src/,...] extract.py GITDIR OUT.jsonl TAG...

Only the format strings are kept (data about NCCL's output), not code."""
import json, os, re, subprocess, sys

CALLS = {
    # name: index of the format argument
    'INFO': 1, 'WARN': 0, 'VERSION': 0, 'INFO_LOC': 1,
    'NCCL_OFI_INFO': 1, 'NCCL_OFI_WARN': 0, 'NCCL_OFI_INFO_ONCE': 1, 'NCCL_OFI_WARN_ONCE': 0,
    'printf': 0, 'sprintf': 1, 'snprintf': 2,
}
MACROS = {'PRIx64': 'lx', 'PRIu64': 'lu', 'PRId64': 'ld', 'PRIi64': 'li', 'PRIX64': 'lX',
          'PRIu32': 'u', 'PRIx32': 'x', 'PRId32': 'd', 'PRIu16': 'u', 'PRIu8': 'u'}
EXTS = ('.cc', '.cu', '.h', '.c', '.cpp', '.hpp', '.cuh')

tok_re = re.compile(r'''
   (?P<comment>//[^\n]*|/\*.*?\*/)
 | (?P<str>"(?:\\.|[^"\\\n])*")
 | (?P<chr>'(?:\\.|[^'\\\n])*')
 | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
 | (?P<num>[0-9][0-9a-zA-Z_.]*)
 | (?P<ws>\s+)
 | (?P<op>.)''', re.S | re.X)

def tokens(src):
    src = src.replace('\\\n', '')  # C line splices
    out = []
    for m in tok_re.finditer(src):
        k = m.lastgroup
        if k in ('comment', 'ws'):
            continue
        out.append((k, m.group(k)))
    return out

def str_defines(src):
    """#define NAME "lit" STR(X) "lit" ... (string macros such as VERSION_STRING)."""
    d = {}
    for m in re.finditer(r'^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+((?:[^\n]*\\\n)*[^\n]*)', src, re.M):
        body = m.group(2).replace('\\\n', ' ')
        if '"' in body:
            d[m.group(1)] = tokens(body)
    return d

def fmt_of(arg, defs, depth=0):
    """Concatenate the string literals of one argument; macros become specs."""
    parts, lit = [], False
    i = 0
    while i < len(arg):
        k, v = arg[i]
        if k == 'str':
            parts.append(v[1:-1]); lit = True
        elif k == 'id' and v in MACROS:
            parts.append(MACROS[v])
        elif k == 'id' and v in ('STR', 'xstr', 'NCCL_STR') and i + 1 < len(arg) and arg[i+1][1] == '(':
            # STR(NCCL_MAJOR): a number at run time
            j = i + 2
            while j < len(arg) and arg[j][1] != ')':
                j += 1
            # STR(NCCL_MAJOR) is a number; STR(NCCL_PLUGIN_SYMBOL) a name
            inner = [t[1] for t in arg[i+2:j]]
            num = inner and inner[0] in ('NCCL_MAJOR', 'NCCL_MINOR', 'NCCL_PATCH', 'CUDA_MAJOR', 'CUDA_MINOR')
            parts.append('%d' if num else '%s'); i = j
        elif k == 'id' and v in defs and depth < 3:
            f = fmt_of(defs[v], defs, depth + 1)
            if f is None:
                return None
            parts.append(f); lit = True
        elif k == 'id' and v in ('NCCL_SUFFIX', 'NCCL_GIT_BRANCH', 'NCCL_GIT_COMMIT_HASH', 'PACKAGE_STRING', 'PACKAGE_VERSION'):
            parts.append('%s')
        else:
            return None
        i += 1
    return ''.join(parts) if lit else None

def calls(src):
    toks = tokens(src)
    defs = str_defines(src)
    n = len(toks)
    for i, (k, v) in enumerate(toks):
        if k != 'id' or v not in CALLS or i + 1 >= n or toks[i+1][1] != '(':
            continue
        if i > 0 and toks[i-1][1] in ('define',):
            continue
        # split arguments at depth-1 commas
        args, cur, depth, j = [], [], 0, i + 1
        while j < n:
            t = toks[j]
            if t[1] in '([{':
                depth += 1
                if depth == 1:
                    j += 1; continue
            elif t[1] in ')]}':
                depth -= 1
                if depth == 0:
                    args.append(cur); break
            elif t[1] == ',' and depth == 1:
                args.append(cur); cur = []; j += 1; continue
            cur.append(t); j += 1
        idx = CALLS[v]
        if idx >= len(args):
            continue
        f = fmt_of(args[idx], defs)
        if f is None:
            continue
        # "%s" with a string macro argument (INFO(NCCL_ALL, "%s", VERSION_STRING))
        if f in ('%s', '%s\\n') and idx + 1 < len(args):
            g = fmt_of(args[idx + 1], defs)
            if g is not None:
                f = g
        if v == 'INFO_LOC':
            # INFO_LOC(flags, fmt) prints INFO("%s:%d (%s) " fmt, file, line, func) (2.30).
            f = '%s:%d (%s) ' + f
            v = 'INFO'
        if v.startswith('NCCL_OFI_'):
            # aws-ofi-nccl's macros prepend "NET/OFI " to every format.
            f = 'NET/OFI ' + f
            v = v[len('NCCL_OFI_'):]
        yield v, f

def main():
    gitdir, out, tags = sys.argv[1], sys.argv[2], sys.argv[3:]
    # PREFIXES=src/ limits the walk to the library's own sources (NVIDIA/nccl
    # also carries example plugins under ext-*/ and plugins/).
    prefixes = tuple(p for p in os.environ.get('PREFIXES', '').split(',') if p)
    git = ['git', '--git-dir', gitdir]
    blobcache = {}
    rows = {}  # (call, fmt) -> {'files': set, 'tags': []}
    cat = subprocess.Popen(git + ['cat-file', '--batch'], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    def blob(sha):
        cat.stdin.write((sha + '\n').encode()); cat.stdin.flush()
        hdr = cat.stdout.readline().split()
        size = int(hdr[2])
        data = cat.stdout.read(size); cat.stdout.read(1)
        return data.decode('utf-8', 'replace')
    for tag in tags:
        ls = subprocess.run(git + ['ls-tree', '-r', tag], capture_output=True, text=True, check=True).stdout
        seen = set()
        for line in ls.splitlines():
            meta, path = line.split('\t', 1)
            _, typ, sha = meta.split()
            if typ != 'blob' or not path.endswith(EXTS):
                continue
            if prefixes and not path.startswith(prefixes):
                continue
            if '/test' in path or path.startswith(('test', 'tests/')):
                continue
            if sha not in blobcache:
                blobcache[sha] = list(set(calls(blob(sha))))
            for call, f in blobcache[sha]:
                key = (call, f)
                r = rows.setdefault(key, {'files': set(), 'tags': []})
                r['files'].add(path)
                if key not in seen:
                    r['tags'].append(tag); seen.add(key)
    with open(out, 'w') as fh:
        for (call, f), r in rows.items():
            fh.write(json.dumps({'call': call, 'format': f, 'files': sorted(r['files']), 'tags': r['tags']}) + '\n')

main()
