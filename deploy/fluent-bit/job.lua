-- Sets record.job from the pod labels that name a training job (the same
-- keys and order as ncclwatch's pipeline.DefaultJobLabels), falling back to
-- the pod name, and record.cluster from the CLUSTER_NAME environment variable.
local keys = {
  "training.kubeflow.org/job-name",
  "batch.kubernetes.io/job-name",
  "jobset.sigs.k8s.io/jobset-name",
  "volcano.sh/job-name",
  "ray.io/cluster",
  "slurm.job-id",
  "slurm_job_id",
  "job-name",
  "app.kubernetes.io/instance",
}
local cluster = os.getenv("CLUSTER_NAME")

function add_job(tag, timestamp, record)
  local k8s = record["kubernetes"]
  local job = nil
  if k8s ~= nil then
    local labels = k8s["labels"]
    if labels ~= nil then
      for _, key in ipairs(keys) do
        if labels[key] ~= nil and labels[key] ~= "" then
          job = labels[key]
          break
        end
      end
    end
    if job == nil then
      job = k8s["pod_name"]
    end
  end
  if job == nil then
    return 0, timestamp, record
  end
  record["job"] = job
  if cluster ~= nil and cluster ~= "" then
    record["cluster"] = cluster
  end
  return 2, timestamp, record
end
