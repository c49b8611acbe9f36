#!/usr/bin/env python3
"""Write the derived_*.log files: Inspector records built field by field in
the order and with the printf conversions of NCCL's writer
(inspectorCommInfoHeader, inspectorCommInfoMetaHeader,
inspectorCompletedColl[Verbose], inspectorCompletedP2p[Verbose]; json.cc:
keys as "%s":, integers %d/%lu, doubles %lf, a NaN double as "nan").
They are derived from the source, not captured from a run (SOURCES.md)."""
import json

def d(v): return "%f" % v if v == v else '"nan"'

def header(h, name=None):
    s = '{"id":"%s"' % h['id']
    if name is not None: s += ',"comm_name":"%s"' % name
    return s + ',"rank":%d,"n_ranks":%d,"nnodes":%d}' % (h['rank'], h['n_ranks'], h['nnodes'])

def meta(ts, host, pid, rev=""):
    return ('{"inspector_output_format_version":"v4.0","git_rev":"%s","rec_mechanism":"nccl_profiler_interface",'
            '"dump_timestamp_us":%d,"hostname":"%s","pid":%d}' % (rev, ts, host, pid))

def trace(pre, chans, base):
    sn = '{"%s_start_sn":1,"%s_stop_sn":2,"kernel_events":[' % (pre, pre) + ','.join(
        '{"channel_id":%d,"kernel_start_sn":%d,"kernel_stop_sn":%d,"kernel_record_sn":%d}' % (c, 3+3*c, 5+3*c, 4+3*c)
        for c in range(chans)) + ']}'
    ts = '{"%s_start_ts":%d,"%s_stop_ts":%d,"kernel_events":[' % (pre, base, pre, base+4) + ','.join(
        '{"channel_id":%d,"kernel_start_ts":%d,"kernel_stop_ts":%d,"kernel_record_ts":%d}' % (c, base+90+c, base+1880+c, base+1880+c)
        for c in range(chans)) + ']}'
    return ',"event_trace_sn":%s,"event_trace_ts":%s' % (sn, ts)

def coll(op, sn, size, us, src, alg, bus, verbose=None):
    s = ('{"coll":"%s","coll_sn":%d,"coll_msg_size_bytes":%d,"coll_exec_time_us":%d,"coll_timing_source":"%s",'
         '"coll_algobw_gbs":%s,"coll_busbw_gbs":%s' % (op, sn, size, us, src, d(alg), d(bus)))
    if verbose: s += trace('coll', *verbose)
    return s + '}'

def p2p(op, sn, peer, size, us, src, alg, bus, verbose=None):
    s = ('{"p2p":"%s","p2p_sn":%d,"p2p_peer":%d,"p2p_msg_size_bytes":%d,"p2p_exec_time_us":%d,"p2p_timing_source":"%s",'
         '"p2p_algobw_gbs":%s,"p2p_busbw_gbs":%s' % (op, sn, peer, size, us, src, d(alg), d(bus)))
    if verbose: s += trace('p2p', *verbose)
    return s + '}'

def rec(h, m, kind, perf): return '{"header":%s,"metadata":%s,"%s":%s}' % (h, m, kind, perf)

H = dict(id="0x4f2a9c31d07e15", rank=0, n_ranks=16, nnodes=2)
H9 = dict(id="0x4f2a9c31d07e15", rank=9, n_ranks=16, nnodes=2)
FILES = {
 'derived_v2.28.3_plain.log': [
   rec(header(H), meta(1764072000123456, "gpu-node-a", 41235), "coll_perf", coll("AllReduce", 812, 268435456, 1893, "kernel_gpu", 141.804467, 265.883376)),
   rec(header(H9), meta(1764072000124001, "gpu-node-b", 51877), "coll_perf", coll("ReduceScatter", 813, 33554432, 402, "kernel_cpu", 83.469731, 78.252873)),
   rec(header(H), meta(1764072000125100, "gpu-node-a", 41235), "coll_perf", coll("AllGather", 814, 0, 0, "collective_cpu", float('nan'), float('nan'))),
 ],
 'derived_v2.28.3_verbose.log': [
   rec(header(H), meta(1764072001000000, "gpu-node-a", 41235, "b0a5f2c1d"), "coll_perf", coll("AllReduce", 900, 1073741824, 7551, "kernel_gpu", 142.196066, 266.617624, (2, 1764072000992000))),
 ],
 'derived_v2.30.3_plain.log': [
   rec(header(H, "DP Group 0"), meta(1764072002000000, "gpu-node-a", 41235), "coll_perf", coll("AllReduce", 1000, 268435456, 1893, "kernel_gpu", 141.804467, 265.883376)),
   rec(header(dict(H, id="0x1c9e07d3b2a4f8"), "unknown"), meta(1764072002000500, "gpu-node-a", 41235), "p2p_perf", p2p("Send", 17, 8, 536870912, 1154, "kernel_gpu", 465.225126, 465.225126)),
 ],
 'derived_v2.30.3_verbose.log': [
   rec(header(dict(H9, id="0x1c9e07d3b2a4f8"), "PP Group 1"), meta(1764072003000000, "gpu-node-b", 51877), "p2p_perf", p2p("Recv", 18, 1, 536870912, 1170, "kernel_gpu", 458.863120, 458.863120, (1, 1764072002998000))),
   rec(header(H, "DP Group 0"), meta(1764072003000100, "gpu-node-a", 41235), "coll_perf", coll("AllGather", 1001, 134217728, 1021, "kernel_gpu", 131.456342, 123.240321, (3, 1764072002999000))),
 ],
}

if __name__ == '__main__':
    for name, lines in FILES.items():
        for l in lines: json.loads(l)
        open(name, 'w').write('\n'.join(lines) + '\n')
