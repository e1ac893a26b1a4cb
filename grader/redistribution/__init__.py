"""Redistribution: a validated ranking becomes weights (registered schemes), and passing advantages are
rescaled so their sum is unchanged (pure numpy). `simulate` shows why it matters under GRPO.
"""
