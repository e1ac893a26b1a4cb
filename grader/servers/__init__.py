"""Local inference servers on loopback: the scripted test server (`scripted`), llama.cpp's `llama-server`
(`llamacpp`) and llama-cpp-python's server (`llamacpp_python`), built offline, and `gagar serve` (`serve`).
"""
