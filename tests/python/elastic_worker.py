"""The worker side of test_torch_elastic.py (and bench/python/elastic_recovery.py): one program,
several modes, each started by the test with a bounded wait.

    elastic_worker.py unit DIR        under plain ringfoldrun -np 2: State/ObjectState/TorchState
                                      commit, restore, sync; ElasticSampler; run() outside elastic
                                      mode. Asserts; prints "UNIT OK <rank>".
    elastic_worker.py protocol DIR    one process: the worker side of the store protocol against
                                      keys written here (no launcher).
    elastic_worker.py refuse DIR      one process with RINGFOLD_ELASTIC=1: process sets refused.
    elastic_worker.py train DIR       elastic training under ringfoldrun --host-discovery-script
                                      (Horovod's canonical loop: TorchState with a model, a
                                      DistributedOptimizer and an ElasticSampler).
    elastic_worker.py replay DIR      one process, no launcher: replays the training from the last
                                      incarnation's resume point at that incarnation's size and
                                      compares with the final weights.
    elastic_worker.py torchrun DIR    under torchrun (--max-restarts): a checkpointed ringfold job.
    elastic_worker.py torchrun_replay DIR   the same training in one process, compared with it.

train mode, controlled by environment variables:
  ELASTIC_KILL     "inc:rank:step[:signal],...": the worker of rank `rank` in incarnation `inc`
                   sends itself `signal` (KILL default, or STOP) just before step `step`
                   (mid-step: after its forward pass, so its peers are already in the step's
                   allreduces).
  ELASTIC_MARK     "inc:step": rank 0 of incarnation `inc` writes DIR/mark.<step> before that
                   step and waits (bounded) until ringfoldrun has set the update key, i.e. until
                   the test rewrote the discovery file and the launcher saw it.
  ELASTIC_EPOCHS, ELASTIC_STEP_SLEEP: the length of the run.
Each worker appends lines "<event> key=value ..." to DIR/log.<worker id>: start, sync (after
every state sync: incarnation, rank, size, step, weights hash), commit, interrupt, reset, done.
Rank 0 writes DIR/resume.<inc>.pt after each sync and DIR/final.pt at the end.
"""
import hashlib
import os
import signal
import sys
import time

import torch

SAMPLES, FEATURES, BATCH, COMMIT_EVERY = 96, 8, 4, 2


def dataset():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=g, dtype=torch.float64)
    w = torch.randn(FEATURES, 1, generator=g, dtype=torch.float64)
    y = x @ w + 0.1 * torch.randn(SAMPLES, 1, generator=g, dtype=torch.float64)
    return torch.utils.data.TensorDataset(x, y)


def make_model(seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(FEATURES, 1, dtype=torch.float64)


def make_optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def weights_hash(model, optimizer):
    h = hashlib.sha1()
    for _, t in sorted(model.state_dict().items()):
        h.update(t.detach().numpy().tobytes())
    for s in optimizer.state_dict()['state'].values():
        for _, t in sorted(s.items()):
            if torch.is_tensor(t):
                h.update(t.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def loss_of(model, x, y):
    return ((model(x) - y) ** 2).mean()


# ---- unit ----------------------------------------------------------------------------------------

def unit(directory):
    import ringfold.torch as hvd
    from ringfold.elastic import ObjectState
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    assert size == 2, size

    # ObjectState: sync gives rank 0's values; restore undoes changes since the last commit.
    s = ObjectState(epoch=rank * 10, names=['r%d' % rank])
    s.sync()
    assert (s.epoch, s.names) == (0, ['r0']), (s.epoch, s.names)
    s.epoch = 5
    s.commit()                       # outside elastic mode: no update, no interrupt
    s.epoch = 7
    s.restore()
    assert s.epoch == 5, s.epoch
    # The framework-neutral default broadcast (numpy) and Horovod's explicit arguments.
    t = ObjectState(hvd.broadcast_object, hvd.rank, value={'from': rank})
    t.sync()
    assert t.value == {'from': 0}, t.value

    # TorchState: model, optimizer, sampler and plain attributes.
    data = dataset()
    model = make_model(100 + rank)    # different weights on each rank
    opt = hvd.DistributedOptimizer(make_optimizer(model.parameters()), named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=3)
    state = hvd.elastic.TorchState(model=model, optimizer=opt, sampler=sampler, step=rank)
    state.sync()
    root = make_model(100)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), root.state_dict().values()))
    assert state.step == 0
    hashes = hvd.allgather_object(weights_hash(model, opt))
    assert hashes[0] == hashes[1], hashes
    # A training step changes weights and optimizer state; restore brings back the commit.
    committed = weights_hash(model, opt)
    state.commit()
    x, y = data[:8]
    opt.zero_grad()
    loss_of(model, x, y).backward()
    opt.step()
    state.sampler.record_batch(0, 4)
    state.step = 1
    assert weights_hash(model, opt) != committed
    state.restore()
    assert weights_hash(model, opt) == committed
    assert state.step == 0 and state.sampler.processed_num == 0
    # Replacing a handled attribute saves it at once (Horovod's __setattr__).
    other = make_model(7)
    state.model = other
    assert state._handlers['model'].value is other
    state.model = model

    # ElasticSampler: disjoint halves covering the dataset; recorded batches are skipped after a
    # reload; set_epoch reshuffles identically on both ranks.
    mine = list(iter(sampler))
    everyone = hvd.allgather_object(mine)
    assert sorted(everyone[0] + everyone[1]) == list(range(len(data))), everyone
    assert not set(everyone[0]) & set(everyone[1])
    sampler.record_batch(0, 4)                  # 4 samples on each of 2 ranks
    sampler.load_state_dict(sampler.state_dict())
    assert len(sampler) == (len(data) - 8) // 2
    first8 = set(mine[:4]) | set(hvd.allgather_object(mine[:4])[1 - rank])
    assert not first8 & set(iter(sampler)), 'processed samples handed out again'
    sampler.set_epoch(1)
    assert sampler.processed_num == 0 and len(sampler) == len(data) // 2
    order = hvd.allgather_object(list(iter(sampler)))
    assert order[0] != everyone[0]              # reshuffled
    # Fewer samples left than ranks: padded cyclically (Horovod's assertion would fail).
    tiny = hvd.elastic.ElasticSampler(list(range(3)), shuffle=False)
    tiny.processed_num = 2                      # one sample left for two ranks
    tiny.reset()
    assert list(iter(tiny)) == [2], list(iter(tiny))

    # run() outside elastic mode: a HostsUpdatedInterrupt resets in place and runs func again;
    # reset callbacks run after the engine is back; HorovodInternalError is raised again after
    # restore().
    calls, resets = [], []
    state.register_reset_callbacks([lambda: resets.append(hvd.size())])

    @hvd.elastic.run
    def train(st, limit):
        calls.append(st.step)
        if len(calls) == 1:
            st.step = 3
            st.commit()
            raise hvd.HostsUpdatedInterrupt(False)
        return st.step * limit

    assert train(state, 10) == 30
    assert calls == [0, 3] and resets == [2], (calls, resets)
    assert hvd.is_initialized() and hvd.size() == 2

    @hvd.elastic.run
    def failing(st):
        st.step = 99                  # not committed: restore() puts 3 back
        raise hvd.HorovodInternalError('simulated peer failure')

    try:
        failing(state)
        raise AssertionError('HorovodInternalError was not raised again outside elastic mode')
    except hvd.HorovodInternalError as e:
        assert 'simulated' in str(e)
    assert state.step == 3, state.step

    # Sync on reset: a rank whose state differs gets rank 0's at the next run().
    state.step = 40 + rank
    state.save()

    @hvd.elastic.run
    def report(st):
        return st.step

    assert report(state) == 40
    hvd.shutdown()
    print('UNIT OK %d' % rank, flush=True)


def protocol(directory):
    """membership.rejoin against a launcher played here, in this process's own store (a job of
    one without a store address): the ready key, the new rank variables, a worker left out
    (exits 0), and elastic/failed (raises with the launcher's reason)."""
    from ringfold.elastic import _store, membership
    env = os.environ
    alone = dict(RINGFOLD_RANK='0', RINGFOLD_SIZE='1', HOROVOD_RANK='0', HOROVOD_SIZE='1')
    env.update(RINGFOLD_ELASTIC='1', RINGFOLD_ELASTIC_WORKER_ID='hostA:0:7', RINGFOLD_INCARNATION='1',
               RINGFOLD_ELASTIC_TIMEOUT='2', RINGFOLD_TIMEOUT='1', **alone)
    assert membership.enabled() and not membership.update_pending()
    _store.set('elastic/inc1/update', '1')
    assert membership.update_pending()
    # Incarnation 3 (2 failed while this worker waited) lists it as rank 1 of 2.
    _store.set('elastic/inc3/table', 'hostB:0:2 0 2 0 1 0 2 hostB\nhostA:0:7 1 2 0 1 1 2 hostA\n')
    _store.set('elastic/current', '3')
    row = membership.rejoin('failed')
    assert (row.rank, row.size, row.cross_rank, row.host) == (1, 2, 1, 'hostA'), row.values
    assert [env[v] for v in ('RINGFOLD_RANK', 'HOROVOD_RANK', 'RINGFOLD_SIZE', 'HOROVOD_SIZE')] == ['1', '1', '2', '2']
    assert (env['RINGFOLD_CROSS_RANK'], env['RINGFOLD_CROSS_SIZE'], env['RINGFOLD_INCARNATION']) == ('1', '2', '3')
    assert 'HOROVOD_CROSS_RANK' not in env      # only the twins the launcher set
    env.update(alone)                            # back to this process's own store
    assert _store.get('elastic/inc1/ready/hostA:0:7', timeout=1) == b'failed'
    # Incarnation 4 leaves it out: it exits with status 0.
    _store.set('elastic/inc4/table', 'hostB:0:2 0 1 0 1 0 1 hostB\n')
    _store.set('elastic/current', '4')
    try:
        membership.rejoin('interrupted')
        raise AssertionError('a worker left out of the table did not exit')
    except SystemExit as e:
        assert e.code == 0, e.code
    env.update(alone)
    assert _store.get('elastic/inc3/ready/hostA:0:7', timeout=1) == b'interrupted'
    # Nobody answers: the wait ends after RINGFOLD_ELASTIC_TIMEOUT + RINGFOLD_TIMEOUT + 15 s.
    start = time.monotonic()
    try:
        membership.wait_for_next(4, budget=0.5)
        raise AssertionError('the wait for a next incarnation did not end')
    except TimeoutError as e:
        assert 'no incarnation after 4' in str(e), e
    assert time.monotonic() - start < 30
    # The launcher gives up: the waiting worker raises with its reason.
    env['RINGFOLD_INCARNATION'] = '4'
    _store.set('elastic/failed', 'only 1 workers left, fewer than --min-np 2, after waiting 3 s')
    try:
        membership.rejoin('failed')
        raise AssertionError('elastic/failed did not end the wait')
    except RuntimeError as e:
        assert 'the job cannot go on: only 1 workers left' in str(e), e
    assert membership.wait_budget() == 2 + 1 + 15
    print('PROTOCOL OK', flush=True)


def refuse(directory):
    import ringfold.torch as hvd
    assert os.environ.get('RINGFOLD_ELASTIC') == '1'
    for sets in ([hvd.ProcessSet([0])], 'dynamic'):
        try:
            hvd.init(process_sets=sets)
            raise AssertionError('init(process_sets=%r) was accepted in elastic mode' % (sets,))
        except ValueError as e:
            message = str(e)
            assert 'not supported in elastic mode' in message and '#4021' in message, message
            print('REFUSED %s: %s' % (sets if isinstance(sets, str) else 'static', message), flush=True)
    print('REFUSE OK', flush=True)


# ---- train ---------------------------------------------------------------------------------------

def _plan(name):
    out = []
    for item in filter(None, os.environ.get(name, '').split(',')):
        out.append(item.split(':'))
    return out


def train(directory):
    import ringfold.torch as hvd
    from ringfold.elastic import membership

    epochs = int(os.environ.get('ELASTIC_EPOCHS', '2'))
    step_sleep = float(os.environ.get('ELASTIC_STEP_SLEEP', '0.02'))
    wid = os.environ.get('RINGFOLD_ELASTIC_WORKER_ID', 'solo')
    log_file = open(os.path.join(directory, 'log.' + wid.replace(':', '_')), 'a', buffering=1)

    def log(event, **fields):
        fields.setdefault('t', '%.6f' % time.time())
        log_file.write(event + ' ' + ' '.join('%s=%s' % kv for kv in fields.items()) + '\n')
        log_file.flush()

    def inc():
        return int(os.environ.get('RINGFOLD_INCARNATION', '0'))

    log('start', pid=os.getpid(), inc=inc(), wid=wid)
    hvd.init()
    data = dataset()
    model = make_model(1000 + os.getpid() % 1000)      # a new worker starts from other weights
    optimizer = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                         named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=11)
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, epoch=0, step=0)
    state.register_reset_callbacks([lambda: log('reset', inc=inc(), rank=hvd.rank(), size=hvd.size())])
    kills = {(int(i), int(r), int(s)): (sig[0] if sig else 'KILL') for i, r, s, *sig in _plan('ELASTIC_KILL')}
    marks = {(int(i), int(s)) for i, s in _plan('ELASTIC_MARK')}

    def save(path):
        torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict(),
                    'sampler': state.sampler.state_dict(), 'epoch': state.epoch, 'step': state.step,
                    'size': hvd.size()}, path + '.tmp')
        os.replace(path + '.tmp', path)

    def commit():
        try:
            state.commit()
        except hvd.HostsUpdatedInterrupt:
            log('interrupt', inc=inc(), rank=hvd.rank(), step=state.step)
            raise
        finally:
            log('commit', inc=inc(), rank=hvd.rank(), step=state.step, hash=weights_hash(model, optimizer))

    @hvd.elastic.run
    def run(state):
        log('sync', inc=inc(), rank=hvd.rank(), size=hvd.size(), step=state.step, epoch=state.epoch,
            hash=weights_hash(model, optimizer))
        if hvd.rank() == 0:
            save(os.path.join(directory, 'resume.%d.pt' % inc()))
        while state.epoch < epochs:
            loader = torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=state.sampler)
            for idx, (x, y) in enumerate(loader):
                optimizer.zero_grad()
                loss = loss_of(model, x, y)
                key = (inc(), hvd.rank(), state.step)
                if key in kills:
                    log('suicide', inc=inc(), rank=hvd.rank(), step=state.step, signal=kills[key])
                    os.kill(os.getpid(), getattr(signal, 'SIG' + kills[key]))
                if (inc(), state.step) in marks and hvd.rank() == 0:
                    open(os.path.join(directory, 'mark.%d' % state.step), 'w').close()
                    deadline = time.monotonic() + 60
                    while not membership.update_pending() and time.monotonic() < deadline:
                        time.sleep(0.05)
                loss.backward()
                optimizer.step()
                state.sampler.record_batch(idx, BATCH)
                state.step += 1
                if state.step % COMMIT_EVERY == 0:
                    commit()
                time.sleep(step_sleep)
            state.epoch += 1
            state.sampler.set_epoch(state.epoch)
            commit()
        return hvd.rank(), hvd.size()

    rank, size = run(state)
    log('done', inc=inc(), rank=rank, size=size, step=state.step, hash=weights_hash(model, optimizer))
    if rank == 0:
        save(os.path.join(directory, 'final.pt'))
    hvd.shutdown()


def replay(directory, epochs=None):
    """Trains from the newest resume.<inc>.pt at its size in one process, as the ranks would
    (each rank's batch from an ElasticSampler of that rank, gradients averaged), and compares
    with final.pt."""
    from ringfold.torch.elastic import sampler as sampler_module
    incs = sorted(int(f.split('.')[1]) for f in os.listdir(directory) if f.startswith('resume.'))
    start = torch.load(os.path.join(directory, 'resume.%d.pt' % incs[-1]))
    final = torch.load(os.path.join(directory, 'final.pt'))
    size = start['size']
    data = dataset()
    model = make_model(0)
    model.load_state_dict(start['model'])
    optimizer = make_optimizer(model.parameters())
    optimizer.load_state_dict(start['optimizer'])
    # Rank r's sampler: the real class with ringfold's rank()/size() replaced (reset() reads
    # them; rank() is then corrected, it only decides which share __iter__ hands out).
    sampler_module.rank, sampler_module.size = (lambda: 0), (lambda: size)

    def relocate(s, r, call, *args):
        call(*args)
        s.rank = r

    samplers = []
    for r in range(size):
        s = sampler_module.ElasticSampler(data, shuffle=True, seed=11)
        relocate(s, r, s.load_state_dict, start['sampler'])
        samplers.append(s)
    epoch, step = start['epoch'], start['step']
    epochs = int(os.environ.get('ELASTIC_EPOCHS', '2')) if epochs is None else epochs
    while epoch < epochs:
        loaders = [list(torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=s)) for s in samplers]
        for idx, batches in enumerate(zip(*loaders)):
            grads = []
            for x, y in batches:
                optimizer.zero_grad()
                loss_of(model, x, y).backward()
                grads.append([p.grad.clone() for p in model.parameters()])
            for p, *gs in zip(model.parameters(), *grads):
                p.grad = sum(gs) / size
            optimizer.step()
            for s in samplers:
                s.record_batch(idx, BATCH)
            step += 1
        epoch += 1
        for r, s in enumerate(samplers):
            relocate(s, r, s.set_epoch, epoch)
    assert step == final['step'], (step, final['step'])
    diffs = [float((a - b).abs().max()) for a, b in zip(model.state_dict().values(), final['model'].values())]
    print('REPLAY from inc %d step %d at size %d: %d steps, max |difference| %.3g'
          % (incs[-1], start['step'], size, step - start['step'], max(diffs)), flush=True)
    assert max(diffs) <= 1e-9, diffs


# ---- torchrun ------------------------------------------------------------------------------------

def torchrun(directory):
    """A checkpointed job under torchrun: each epoch ends with rank 0 saving DIR/ckpt.pt; a start
    loads it. With TORCHRUN_CRASH=1, rank 1 of the first attempt dies in epoch 2, so torchrun
    (--max-restarts) restarts every worker, which go on from the checkpoint."""
    import ringfold.torch as hvd
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    attempt = int(os.environ.get('TORCHELASTIC_RESTART_COUNT', '0'))
    data = dataset()
    model = make_model(5)
    optimizer = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                         named_parameters=model.named_parameters())
    ckpt = os.path.join(directory, 'ckpt.pt')
    epoch = 0
    if os.path.exists(ckpt):
        saved = torch.load(ckpt)
        model.load_state_dict(saved['model'])
        optimizer.load_state_dict(saved['optimizer'])
        epoch = saved['epoch']
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    print('ATTEMPT %d rank %d size %d from epoch %d' % (attempt, rank, size, epoch), flush=True)
    sampler = torch.utils.data.distributed.DistributedSampler(data, num_replicas=size, rank=rank, shuffle=False)
    while epoch < 4:
        for x, y in torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=sampler):
            optimizer.zero_grad()
            loss_of(model, x, y).backward()
            optimizer.step()
            if os.environ.get('TORCHRUN_CRASH') == '1' and attempt == 0 and epoch == 2 and rank == 1:
                print('CRASH rank 1 in epoch 2', flush=True)
                os._exit(3)
        epoch += 1
        if rank == 0:
            torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'epoch': epoch},
                       ckpt + '.tmp')
            os.replace(ckpt + '.tmp', ckpt)
        hvd.barrier()
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(directory, 'final.pt'))
    print('TORCHRUN DONE attempt %d rank %d' % (attempt, rank), flush=True)
    hvd.shutdown()


def torchrun_replay(directory):
    """torchrun's job in one process without any failure (2 virtual ranks, gradients averaged),
    compared with the final weights the restarted job wrote."""
    data = dataset()
    model = make_model(5)
    optimizer = make_optimizer(model.parameters())
    samplers = [torch.utils.data.distributed.DistributedSampler(data, num_replicas=2, rank=r, shuffle=False)
                for r in range(2)]
    for _ in range(4):
        loaders = [list(torch.utils.data.DataLoader(data, batch_size=BATCH, sampler=s)) for s in samplers]
        for batches in zip(*loaders):
            grads = []
            for x, y in batches:
                optimizer.zero_grad()
                loss_of(model, x, y).backward()
                grads.append([p.grad.clone() for p in model.parameters()])
            for p, *gs in zip(model.parameters(), *grads):
                p.grad = sum(gs) / 2
            optimizer.step()
    final = torch.load(os.path.join(directory, 'final.pt'))
    diffs = [float((a - b).abs().max()) for a, b in zip(model.state_dict().values(), final.values())]
    print('TORCHRUN REPLAY max |difference| %.3g' % max(diffs), flush=True)
    assert max(diffs) <= 1e-9, diffs


if __name__ == '__main__':
    modes = {'unit': unit, 'protocol': protocol, 'refuse': refuse, 'train': train, 'replay': replay,
             'torchrun': torchrun, 'torchrun_replay': torchrun_replay}
    if len(sys.argv) != 3 or sys.argv[1] not in modes:
        sys.exit('usage: elastic_worker.py %s DIR' % '|'.join(modes))
    modes[sys.argv[1]](sys.argv[2])
