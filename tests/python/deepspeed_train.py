"""One rank of small DeepSpeed ZeRO training runs on CPU, for tests/python/test_deepspeed_zero.py.

    DS_ACCELERATOR=cpu python deepspeed_train.py --backend gloo|ringfold \
        [--configs 1,2,2-reduce,2-bf16,3] [--steps 20] --out DIR

Contract: started by torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set) or by
ringfoldrun, where `import ringfold.torch.distributed` sets torch's variables for "ringfold"
(for "gloo" RANK, WORLD_SIZE and LOCAL_RANK come from RINGFOLD_*, and MASTER_ADDR and
MASTER_PORT must come from the caller's environment, which ringfoldrun passes on). It calls
`deepspeed.init_distributed(dist_backend=BACKEND)` (after `import ringfold.torch.distributed`
for "ringfold", which registers the backend), checks that torch.distributed really runs on that
backend, then for each named configuration (CONFIGS: a ZeRO stage and variant) in turn trains
the same MLP from the same seed on the same data for STEPS steps with DeepSpeed's Adam
(torch_adam: no compiled op), with buckets small enough that every step reduces and gathers
in several buckets that split tensors. Each rank writes DIR/rank<R>.json after every
configuration, so one that fails leaves the earlier ones:
{"backend", "world_size", "process_group" (the class running the default group on CPU),
 "configs": {NAME: {"loss", "params_sha256", "calls"} or {"error"}}}:
"loss" is the rank's own micro-batch loss per step (float.hex), "params_sha256" hashes the full
parameters as fp32 after the last step (gathered for stage 3), "calls" counts the
torch.distributed functions the run called, by name. Exits 0 only if every configuration
trained; a failed one records its traceback, prints it and exits 1 at once. Every wait is
bounded by --timeout (the process group's timeout).
"""
import argparse
import datetime
import hashlib
import json
import os
import sys
import traceback


def _launcher_env():
    """Fills torch's variables from ringfoldrun's when torchrun did not set them."""
    for torch_name, ringfold_name in (('RANK', 'RINGFOLD_RANK'), ('WORLD_SIZE', 'RINGFOLD_SIZE'),
                                      ('LOCAL_RANK', 'RINGFOLD_LOCAL_RANK')):
        if torch_name not in os.environ and ringfold_name in os.environ:
            os.environ[torch_name] = os.environ[ringfold_name]
    missing = [v for v in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT')
               if v not in os.environ]
    if missing:
        sys.exit('deepspeed_train.py: %s not set (start it with torchrun, or with ringfoldrun)'
                 % ', '.join(missing))


CALLS = {}
TRACED = ('all_reduce', 'all_reduce_coalesced', 'reduce', 'broadcast', 'all_gather',
          'all_gather_into_tensor', '_all_gather_base', 'reduce_scatter', 'reduce_scatter_tensor',
          '_reduce_scatter_base', 'all_to_all_single', 'send', 'recv', 'isend', 'irecv', 'gather',
          'scatter', 'barrier', 'all_gather_object', 'broadcast_object_list', 'new_group')


def _trace_calls(torch):
    """Counts calls of torch.distributed's collectives (how DeepSpeed reaches them), by name."""
    dist = torch.distributed

    def traced(name, fn):
        def wrapper(*args, **kwargs):
            CALLS[name] = CALLS.get(name, 0) + 1
            return fn(*args, **kwargs)
        return wrapper
    for name in TRACED:
        if hasattr(dist, name):
            setattr(dist, name, traced(name, getattr(dist, name)))


def _pg_class(torch):
    """The class that runs the default group's CPU collectives (gloo's, or the Python one)."""
    pg = torch.distributed.distributed_c10d._get_default_group()
    try:
        return type(pg._get_backend(torch.device('cpu'))).__name__
    except (AttributeError, RuntimeError):
        return type(pg).__name__


def _model(torch):
    # 2,294 parameters in 6 tensors of odd sizes: buckets and partitions split tensors unevenly.
    return torch.nn.Sequential(torch.nn.Linear(17, 45), torch.nn.Tanh(),
                               torch.nn.Linear(45, 29), torch.nn.Tanh(),
                               torch.nn.Linear(29, 5))


# The runs, by name: a ZeRO stage and what else differs from the defaults of _config.
CONFIGS = {
    '1': {'stage': 1},
    '2': {'stage': 2},
    # Stage 2 reducing each partition to its owner (dist.reduce) instead of all-reducing whole
    # buckets, with overlap_comm (collectives started with async_op=True, waited on later).
    '2-reduce': {'stage': 2, 'zero': {'use_multi_rank_bucket_allreduce': False,
                                      'overlap_comm': True}},
    # bf16 parameters and gradients (fp32 master weights): the collectives move bf16.
    '2-bf16': {'stage': 2, 'bf16': True},
    '3': {'stage': 3, 'zero': {'stage3_param_persistence_threshold': 0,
                               'stage3_prefetch_bucket_size': 500,
                               'stage3_max_live_parameters': 1000,
                               'stage3_max_reuse_distance': 0}},
}


def _config(name):
    spec = CONFIGS[name]
    zero = {'stage': spec['stage'], 'reduce_bucket_size': 500, 'allgather_bucket_size': 500,
            'overlap_comm': False, 'contiguous_gradients': True}
    zero.update(spec.get('zero', {}))
    config = {
        'train_micro_batch_size_per_gpu': 8,
        'gradient_accumulation_steps': 1,
        'steps_per_print': 10 ** 6,
        'optimizer': {'type': 'Adam', 'params': {'lr': 1e-2, 'torch_adam': True}},
        'zero_optimization': zero,
    }
    if spec.get('bf16'):
        config['bf16'] = {'enabled': True}
    return config


def _params_sha256(torch, engine, stage):
    """The full fp32 parameters, hashed (DeepSpeed's fp32 master copy where it keeps one)."""
    import deepspeed
    params = list(engine.module.parameters())
    h = hashlib.sha256()
    if stage == 3:
        with deepspeed.zero.GatheredParameters(params):
            for p in params:
                h.update(p.detach().to(torch.float32).contiguous().numpy().tobytes())
    else:
        for p in params:
            h.update(p.detach().to(torch.float32).contiguous().numpy().tobytes())
    return h.hexdigest()


def _train(torch, deepspeed, name, steps, rank, world):
    torch.manual_seed(1234)
    model = _model(torch)
    config = _config(name)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config)
    dtype = torch.bfloat16 if config.get('bf16') else torch.float32
    # The same global data on every rank and backend; each rank trains on its own rows.
    gen = torch.Generator().manual_seed(99)
    batch = config['train_micro_batch_size_per_gpu']
    x = torch.randn(steps, batch * world, 17, generator=gen)
    teacher = torch.randn(17, 5, generator=gen) / 17 ** 0.5
    y = torch.tanh(x @ teacher) + 0.01 * torch.randn(steps, batch * world, 5, generator=gen)
    losses = []
    for t in range(steps):
        rows = slice(rank * batch, (rank + 1) * batch)
        out = engine(x[t, rows].to(dtype))
        loss = torch.nn.functional.mse_loss(out.float(), y[t, rows])
        engine.backward(loss)
        engine.step()
        losses.append(float(loss.detach()).hex())
    digest = _params_sha256(torch, engine, config['zero_optimization']['stage'])
    if hasattr(engine, 'destroy'):
        engine.destroy()
    return {'loss': losses, 'params_sha256': digest}


def _train_counted(torch, deepspeed, name, steps, rank, world):
    before = dict(CALLS)
    rec = _train(torch, deepspeed, name, steps, rank, world)
    rec['calls'] = {k: v - before.get(k, 0) for k, v in CALLS.items() if v != before.get(k, 0)}
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--backend', required=True)
    ap.add_argument('--configs', default=','.join(CONFIGS),
                    help='comma-separated names of CONFIGS, run in this order')
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--timeout', type=float, default=60.0)
    ap.add_argument('--out', required=True)
    args = ap.parse_args()
    if os.environ.get('DS_ACCELERATOR') != 'cpu':
        sys.exit('deepspeed_train.py: set DS_ACCELERATOR=cpu')
    import torch
    if args.backend == 'ringfold':
        # Registers the backend; under ringfoldrun it also sets torch's launcher variables.
        import ringfold.torch.distributed  # noqa: F401
    _launcher_env()
    _trace_calls(torch)  # before DeepSpeed looks any of them up
    import deepspeed
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    deepspeed.init_distributed(dist_backend=args.backend, auto_mpi_discovery=False,
                               timeout=datetime.timedelta(seconds=args.timeout))
    actual = torch.distributed.get_backend()
    if actual != args.backend:
        sys.exit('deepspeed_train.py: asked for backend %r, torch.distributed runs %r'
                 % (args.backend, actual))
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    result = {'backend': actual, 'world_size': world, 'process_group': _pg_class(torch),
              'configs': {}}
    path = os.path.join(args.out, 'rank%d.json' % rank)
    for name in args.configs.split(','):
        try:
            rec = _train_counted(torch, deepspeed, name, args.steps, rank, world)
        except Exception:  # recorded for the test's message; later configs are not run
            rec = {'error': traceback.format_exc()}
        result['configs'][name] = rec
        with open(path + '.tmp', 'w') as f:  # whole or absent, whatever happens next
            json.dump(result, f, indent=1)
        os.replace(path + '.tmp', path)
        if 'error' in rec:
            sys.stderr.write('rank %d, config %s:\n%s' % (rank, name, rec['error']))
            os._exit(1)  # a half-failed collective may hang the orderly shutdown
    torch.distributed.destroy_process_group()


if __name__ == '__main__':
    main()
