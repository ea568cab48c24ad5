"""The LLM training planner: Megatron-style TP, PP, CP, EP and DP from a config.json."""
