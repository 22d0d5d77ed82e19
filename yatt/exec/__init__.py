"""yatt.exec: the real executor (Ray, vLLM, Megatron-Core). Import-light: no torch here."""
