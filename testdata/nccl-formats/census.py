#!/usr/bin/env python3
"""Build census.tsv from extract.py's JSON lines: keep the format strings
that carry a fact ncclwatch reads, give each a kind and a stable id, and
record the first and last release that prints it.

Usage: census.py OUT.tsv SOURCE=RAW.jsonl...   (SOURCE: nccl, aws-ofi-nccl, ...)"""
import hashlib, json, re, sys

# (kind, calls, pattern). First match wins; a format no rule matches carries
# no fact the classifier reads and is left out of the census.
LOG = ('INFO', 'WARN', 'VERSION', 'INFO_LOC', 'INFO_ONCE', 'WARN_ONCE')
RULES = [
    ('version', LOG + ('printf',), r'^NCCL version %'),
    ('network', LOG, r'^Using (network|internal Network|external Network) %s$'),
    ('ib_sideband', LOG, r'^NET/IB : Using interface %s for sideband'),
    ('ib_devices', LOG, r'^NET/IB : Using%s|^NET/IB: \[%d\] %s:%d/%s'),
    ('ib_nodevice', LOG, r'^NET/IB : No device found'),
    ('socket_devices', LOG, r'^NET/(Socket|FastSocket) : Using%s'),
    ('socket_threads', LOG, r'^NET/Socket: Using %d threads'),
    ('bootstrap', LOG, r'^(Bootstrap ?: Using|NET : Using interface)'),
    ('noverbs', LOG, r'^Failed to open libibverbs|^Count not open %s$'),
    ('plugin_loaded', LOG, r'Loaded net plugin|^Initialized NET plugin|^Successfully loaded external (network )?plugin'
        r'|^NET/FastSocket plugin initialized|^P2P plugin|^NET/OFI (Initializing|Using) %s$|^NET/OFI Selected [Pp]rovider'),
    ('plugin_not_net', LOG, r'^Successfully loaded external (tuner|profiler|env|gin) plugin'),
    ('plugin_nondevice', LOG, r'^Using (non-device|NCCL_NET_DEVICE_UNPACK) net plugin'),
    ('plugin_assigned', LOG, r'^Assigned NET plugin'),
    ('plugin_failed', LOG, r'^Failed to initialize (NET plugin|any NET plugin)|Failed to find ncclNetPlugin symbol'
        r'|^NET/Plugin ?: Plugin load .*returned|^NET/Plugin: Most recent plugin load returned|^%s/Plugin: %s: %s$'),
    ('plugin_absent', LOG, r'No plugin found|Could not find:|^NET/Plugin: Using internal network plugin|^(NET|%s)/Plugin: %s$'),
    ('plugin_probe', LOG, r'Failed to find nccl(Net|CollNet)Plugin(_v\d+)? symbol|Failed to find %s symbol'
        r'|Plugin name set by env|^Plugin Path|Loaded coll(net)? plugin|^External network plugin'),
    ('connection', LOG, r' via (NET|P2P|SHM)/| via direct shared memory'),
    ('collnet', LOG, r' via COLLNET/|^SHARP rank|^Sharp rank|Connected CollNet|^Connected [Cc]ollnet|^Collnet Chains'
        r'|^CollNet \[(send|recv)\] : |^CollNet Channel %d'),
    ('collnet_off', LOG, r'disabling CollNet|^Cannot initialize CollNet|^CollNet is not supported|^CollNet currently only supports'),
    ('ring_order', ('sprintf', 'snprintf'), r'^Channel %02d(/%02d)? : ?$'),
    ('trees', LOG, r'^Trees%s$|^Tree %d : |^Ring %02d : %d -> %d -> %d$'),
    ('nvls', LOG, r'^NVLS multicast support|^NVLS comm |^NVLS Trees'),
    ('nvls_setup', LOG, r'^NVLS Creat(ing|ed) Multicast group'),
    ('connected', LOG, r'^Connected (all rings|all trees|NVLS tree)'),
    ('comm_nodes', LOG, r'nNodes %d localRanks'),
    ('comm', LOG, r'^(%s |\[Rank %d\] %s |ncclComm\w+ |CommRevokeAsync START )?comm %p rank %d n[Rr]anks|^rank %d nranks %d$|^nranks %d$|^bootstrapSplit'),
    ('coll_trace', LOG, r'^(%s|[A-Z]\w*): opCount %lx .* comm %p \[nranks=%d\]'),
    ('init_timings', LOG, r'^Init timings'),
    ('env', ('INFO',), r'set by environment to|^(%s|NCCL_\w+) set to |set from environment to'),
    ('gdr', LOG, r'^(NET/(%s|\w+) : )?GPU Direct RDMA'),
    ('gdr_plugin_off', LOG, r'^NET/OFI .*disabling GDR$|^NET/OFI GDR disabled'),
    ('channel_counts', LOG, r'coll channels'),
    ('net_trace', LOG, r'^%s:%d (\(%s\) )?-> %d$'),
]
RULES = [(k, c, re.compile(p)) for k, c, p in RULES]

# Other plugin types (tuner, profiler, env, GIN/RMA) print the same shapes.
NOT_NET = re.compile(r'^(TUNER|PROFILER|ENV|GIN|RMA)/')

def kind_of(call, fmt):
    if NOT_NET.search(fmt):
        return None
    for k, calls, pat in RULES:
        if call in calls and pat.search(fmt):
            return k
    return None

def tagkey(t):
    """Release order: numeric parts of the tag; master (the unreleased head) last."""
    if t == 'master':
        return (1 << 30,)
    return tuple(int(x) for x in re.findall(r'\d+', t))

def main():
    out, specs = sys.argv[1], sys.argv[2:]
    rows = []
    for spec in specs:
        source, path = spec.split('=', 1)
        # tag order as given to extract.py = release order
        recs = [json.loads(l) for l in open(path)]
        for r in recs:
            k = kind_of(r['call'], r['format'])
            if k is None:
                continue
            level = {'WARN': 'WARN', 'WARN_ONCE': 'WARN', 'sprintf': 'PART', 'snprintf': 'PART', 'VERSION': 'BANNER', 'printf': 'BANNER'}.get(r['call'], 'INFO')
            h = hashlib.sha1((source + '\0' + level + '\0' + r['format']).encode()).hexdigest()[:8]
            rows.append({'id': k + '-' + h, 'source': source, 'kind': k, 'level': level,
                         'first': r['tags'][0], 'last': r['tags'][-1], 'releases': len(r['tags']),
                         'files': ','.join(r['files']), 'format': r['format'], 'tags': r['tags']})
    # printf (≤ 2.21) and VERSION (≥ 2.22) print the same banner: one row.
    merged = {}
    for r in rows:
        m = merged.get(r['id'])
        if m is None:
            merged[r['id']] = r
            continue
        m['tags'] = sorted(set(m['tags']) | set(r['tags']), key=tagkey)
        m['files'] = ','.join(sorted(set(m['files'].split(',')) | set(r['files'].split(','))))
    rows = list(merged.values())
    for r in rows:
        r['first'], r['last'], r['releases'] = r['tags'][0], r['tags'][-1], len(r['tags'])
    rows.sort(key=lambda r: (r['source'] != 'nccl', r['source'], r['kind'], r['format']))
    with open(out, 'w') as fh:
        fh.write('# id\tsource\tkind\tlevel\tfirst\tlast\treleases\tfiles\tformat\n')
        for r in rows:
            assert '\t' not in r['format'] and '\n' not in r['format'], r['format']
            fh.write('\t'.join(str(r[c]) for c in ('id', 'source', 'kind', 'level', 'first', 'last', 'releases', 'files', 'format')) + '\n')
    json.dump({r['id']: r['tags'] for r in rows}, open(out.replace('.tsv', '-tags.json'), 'w'), indent=0, sort_keys=True)

main()
