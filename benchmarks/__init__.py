# Every benchmark imports this package first: multicast off, overriding inherited values, before
# torch or NCCL start, so what a benchmark spawns inherits it too.
from argus_rt.gpu_env import force_multicast_off

force_multicast_off()
