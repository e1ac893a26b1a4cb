"""Training a grader: distil a teacher into SFT data (`gagar distill`), with label augmentation.

`run` grades groups whose right order is known, keeps the transcripts that agree with the reference and
writes them as `sft` examples; `augment` relabels a transcript; `benchmarks` keeps benchmark groups out.
"""
