"""Resources: the parts a round runs on (policy, sandbox, warehouse, launchers)."""

import os

# OpenMP threads that spin at their barriers collapse torch's throughput when
# anything else wants the cores (the harness's threads run sandboxes while
# the policy samples): they sleep instead. Read once, when torch loads its
# OpenMP runtime, so it is set here, below every import of torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
