"""vLLM's contract: the slice of vLLM spreadrl uses (:mod:`tools.vllm.surface`) and the
check that reads it against the real wheels (:mod:`tools.vllm.contract`)."""
