"""yatt: plan and run RLHF placements (full vs partial colocate) with a GenRM."""
__version__ = "0.1.0"
