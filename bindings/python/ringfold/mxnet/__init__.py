"""ringfold.mxnet does not exist: Apache MXNet is retired.

MXNet's last release was 1.9.1 (May 2022) and the project moved to the Apache Attic in 2023; on
current Python it imports only with numpy pinned below 1.24. ringfold therefore has no MXNet
module. Importing this package raises ImportError saying so and how Gluon code moves to
PyTorch with ringfold.torch (docs/tensorflow.md, section "MXNet").
"""
raise ImportError(
    'ringfold has no MXNet module: Apache MXNet is retired (last release 1.9.1, May 2022; moved to '
    'the Apache Attic in 2023). Move Gluon code to PyTorch and use `import ringfold.torch as hvd` '
    '(hvd.DistributedOptimizer, hvd.broadcast_parameters: the same Horovod API); see the "MXNet" '
    'section of docs/tensorflow.md.')
