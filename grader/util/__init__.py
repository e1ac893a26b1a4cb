"""Foundations every floor may use: atomic files, cache folders, file locks, bounded JSON, safe names,
printable text, registries, concurrency bounds, lazy exports. Nothing here knows groups, git or graders.
"""
