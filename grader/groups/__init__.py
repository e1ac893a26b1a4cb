"""The input floor: groups and results as pydantic models (`models`), group files read and written
(`formats`), dynamic sampling (`sampling`), and the typed outcomes a result carries (`outcomes`).
"""
