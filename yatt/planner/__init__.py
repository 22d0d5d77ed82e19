"""yatt.planner: cost and memory models, profiling, calibration and placement search.

Imports core and sim; never torch/ray/vllm/megatron at import time (`profile` imports
torch lazily, inside its functions).
"""
