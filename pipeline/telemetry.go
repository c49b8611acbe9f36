package pipeline

// TrainingStep is one training-progress line of a job (Megatron-LM,
// torchtitan, Hugging Face, Lightning, DeepSpeed, generic JSON), as stored
// in the training steps table. The telemetry issue fills it in.
type TrainingStep struct {
	Source Source
}

// NCCLTestRun is one nccl-tests result row (or summary) of a job, as stored
// in the nccl-tests table. The telemetry issue fills it in.
type NCCLTestRun struct {
	Source Source
}
