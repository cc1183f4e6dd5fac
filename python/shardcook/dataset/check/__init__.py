"""What proves a dataset whole: `validate` and its scans, the checks of one sample, the code a
dataset's metadata may name, and the reads of saved tensors that run no pickled code."""
