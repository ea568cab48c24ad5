"""The serving planner: a model on a fleet of mixed GPUs, deployed for inference by one engine.

Why a package of its own: it plans replicas, pipeline stages and layer splits for vLLM, SGLang,
TensorRT-LLM, llama.cpp and Hugging Face, and stands alone (it imports no other planned model).
"""
