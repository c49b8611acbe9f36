-- Sets record.job and record.kubernetes.namespace_name from an NCCL
-- Inspector dump file's path, /var/log/nccl-inspector/<namespace>/<job>/
-- <hostname>-pid<pid>.log (inspector.conf), record.kubernetes.host from the
-- NODE_NAME environment variable and record.cluster from CLUSTER_NAME. A
-- record whose path does not have that shape is dropped: it names no job.
local cluster = os.getenv("CLUSTER_NAME")
local node = os.getenv("NODE_NAME")

function add_inspector_job(tag, timestamp, record)
  local path = record["inspector_file"]
  if path == nil then
    return -1, timestamp, record
  end
  local ns, job = string.match(path, "/nccl%-inspector/([^/]+)/([^/]+)/[^/]+$")
  if ns == nil or job == nil then
    return -1, timestamp, record
  end
  record["job"] = job
  local k8s = { namespace_name = ns }
  if node ~= nil and node ~= "" then
    k8s["host"] = node
  end
  record["kubernetes"] = k8s
  if cluster ~= nil and cluster ~= "" then
    record["cluster"] = cluster
  end
  return 2, timestamp, record
end
