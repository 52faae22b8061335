#!/usr/bin/env python3
"""Offline checks of deploy/ (run by tests/deploy under CTest; no cluster, no Docker daemon).

  check_deploy.py schemas     every core Kubernetes object in deploy/kubernetes/*.yaml against
                              the Kubernetes OpenAPI schemas kubernetes-validate ships (strict:
                              unknown fields fail), for the oldest and the newest version it
                              has, plus ringfold's own rules (Indexed Job <-> Service <-> env)
  check_deploy.py crds        MPIJob (kubeflow.org/v2beta1) and PyTorchJob (kubeflow.org/v1),
                              whose CRD schemas that package lacks: apiVersion, kind, known and
                              required fields, replica layout, the mpirun command line, env; their
                              pod templates against the core PodTemplateSpec schema
  check_deploy.py dockerfile  deploy/docker/Dockerfile, dry: base image, every COPY source
                              exists and is not docker-ignored, every script a RUN runs is copied
                              in before it, exists and is executable, every -D option exists in
                              the top CMakeLists.txt, every --target is a CMake target
  check_deploy.py selftest    breaks each of the above on purpose and expects it to be caught
                              (check_deploy_selftest.py)
  check_deploy.py all         all four

schemas, crds and selftest need kubernetes-validate and PyYAML (deploy/venv.sh run ...); the
dockerfile check needs only the standard library. Exit status: 0 when everything holds, 1 with
one line per problem otherwise, 2 when a needed package is missing.
"""
import argparse
import fnmatch
import os
import re
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K8S_DIR = os.path.join("deploy", "kubernetes")
DOCKERFILE = os.path.join("deploy", "docker", "Dockerfile")
DOCKERIGNORE = DOCKERFILE + ".dockerignore"

# Programs an image has besides ringfold's own (RINGFOLD_PROGRAMS in the Dockerfile).
SYSTEM_PROGRAMS = {"mpirun", "/usr/sbin/sshd", "sh", "/bin/sh", "bash", "/bin/bash", "python", "python3"}


def need_packages():
    try:
        import yaml  # noqa: F401
        import kubernetes_validate  # noqa: F401
    except ImportError as e:
        print("check_deploy.py: %s; run it through deploy/venv.sh run python3 %s" % (e, " ".join(sys.argv)),
              file=sys.stderr)
        sys.exit(2)


def read(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return f.read()


# ---- what the source builds ---------------------------------------------------------------

def cmake_targets():
    """Names of add_executable/add_library targets in every CMakeLists.txt (foreach lists resolved)."""
    targets, lists = set(), {}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and not d.startswith("build")]
        if "CMakeLists.txt" not in filenames:
            continue
        with open(os.path.join(dirpath, "CMakeLists.txt")) as f:
            text = re.sub(r"#.*", "", f.read())
        for m in re.finditer(r"\bset\(\s*(\w+)\s+([^)]*)\)", text):
            lists[m.group(1)] = m.group(2).split()
        for m in re.finditer(r"\bforeach\(\s*(\w+)\s+IN\s+LISTS\s+(\w+)\s*\)(.*?)\bendforeach", text, re.S):
            var, lst, body = m.groups()
            if re.search(r"add_executable\(\s*\$\{%s\}" % var, body):
                targets.update(lists.get(lst, []))
        for m in re.finditer(r"\badd_(?:executable|library|custom_target)\(\s*([A-Za-z_][\w.+-]*)", text):
            targets.add(m.group(1))
    return targets


def cmake_options():
    """Cache variables the top CMakeLists.txt declares (option() or set(... CACHE ...))."""
    text = re.sub(r"#.*", "", read("CMakeLists.txt"))
    names = set(re.findall(r"\boption\(\s*(\w+)", text))
    names.update(re.findall(r"\bset\(\s*(\w+)\s+[^)]*\bCACHE\b", text))
    return names


# ---- Dockerfile -------------------------------------------------------------------------------

def dockerfile_instructions(text):
    """(line number, INSTRUCTION, arguments) with continuations joined and comments dropped."""
    out, buf, start = [], "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith("#"):
            continue  # comment lines vanish, also inside a continued instruction
        if not buf:
            start = n
            if not line.strip():
                continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        word, _, rest = buf.strip().partition(" ")
        out.append((start, word.upper(), rest.strip()))
        buf = ""
    return out


def dockerfile_args(instrs):
    args = {}
    for _, ins, rest in instrs:
        if ins == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            args[name.strip()] = value.strip().strip('"')
    return args


def image_programs(dockerfile_text=None):
    args = dockerfile_args(dockerfile_instructions(dockerfile_text or read(DOCKERFILE)))
    return set(args.get("RINGFOLD_PROGRAMS", "").split())


def dockerignore_patterns():
    path = os.path.join(ROOT, DOCKERIGNORE)
    if not os.path.exists(path):
        return []
    pats = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                pats.append(line)
    return pats


def ignored(rel, patterns):
    """Docker's rule, simplified: the last matching pattern wins; '!' re-includes."""
    rel = os.path.normpath(rel)
    result = False
    for p in patterns:
        neg = p.startswith("!")
        pat = os.path.normpath(p[1:] if neg else p).lstrip("/")
        parts = rel.split(os.sep)
        prefixes = [os.sep.join(parts[:i]) for i in range(1, len(parts) + 1)]
        if any(fnmatch.fnmatch(x, pat) or fnmatch.fnmatch(x, "**/" + pat) for x in prefixes):
            result = not neg
    return result


def expand(s, args):
    return re.sub(r"\$\{(\w+)(?::-[^}]*)?\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), s)


def check_dockerfile(text=None, root=None):
    root = root or ROOT
    text = read(DOCKERFILE) if text is None else text
    errs = []
    instrs = dockerfile_instructions(text)
    args = dockerfile_args(instrs)
    targets, options = cmake_targets(), cmake_options()
    patterns = dockerignore_patterns()
    where = DOCKERFILE

    froms = [(n, rest) for n, ins, rest in instrs if ins == "FROM"]
    if not froms or not re.match(r"^debian:(12|bookworm)(-slim)?(@sha256:[0-9a-f]+)?(\s|$)", froms[0][1]):
        errs.append("%s: the base image must be Debian 12 (FROM debian:12), not %r"
                    % (where, froms[0][1] if froms else None))

    programs = set(args.get("RINGFOLD_PROGRAMS", "").split())
    if not programs:
        errs.append("%s: ARG RINGFOLD_PROGRAMS (the programs the image installs) is missing or empty" % where)
    for p in sorted(programs - targets):
        errs.append("%s: RINGFOLD_PROGRAMS names %r, which no CMakeLists.txt defines as a target" % (where, p))

    workdir = "/"
    copied = []  # (container path, repo path) in order
    ran_install_deps = built = pip_guarded = False
    for n, ins, rest in instrs:
        loc = "%s:%d" % (where, n)
        if ins == "WORKDIR":
            workdir = os.path.normpath(os.path.join(workdir, expand(rest, args)))
        elif ins in ("COPY", "ADD"):
            words = shlex.split(rest)
            if any(w.startswith("--from") for w in words):
                continue
            words = [w for w in words if not w.startswith("--")]
            if len(words) < 2:
                errs.append("%s: %s needs a source and a destination" % (loc, ins))
                continue
            *srcs, dst = words
            dst_abs = os.path.normpath(os.path.join(workdir, dst))
            for src in srcs:
                rp = os.path.join(root, src)
                if not os.path.exists(rp):
                    errs.append("%s: %s source %r does not exist in the build context (the repository root)"
                                % (loc, ins, src))
                    continue
                if src not in (".", "./") and ignored(src, patterns):
                    errs.append("%s: %s source %r is excluded by %s" % (loc, ins, src, DOCKERIGNORE))
                if os.path.isdir(rp):
                    copied.append((dst_abs, os.path.normpath(rp)))
                elif dst.endswith("/") or len(srcs) > 1:
                    copied.append((os.path.join(dst_abs, os.path.basename(src)), os.path.normpath(rp)))
                else:
                    copied.append((dst_abs, os.path.normpath(rp)))
        elif ins == "RUN":
            cmd = expand(rest, args)
            lex = shlex.shlex(cmd, posix=True, punctuation_chars=True)
            lex.whitespace_split = True
            try:
                tokens = list(lex)
            except ValueError as e:
                errs.append("%s: RUN is not valid shell (%s)" % (loc, e))
                continue
            for i, t in enumerate(tokens):
                if not re.search(r"\.(sh|py)$", t) and not re.match(r"^(\./)?(scripts|deploy|bench|tests)/", t):
                    continue
                path = os.path.normpath(os.path.join(workdir, t))
                repo = None
                for cdst, crepo in copied:
                    if path == cdst:
                        repo = crepo
                    elif path.startswith(cdst.rstrip("/") + "/") and os.path.isdir(crepo):
                        repo = os.path.join(crepo, os.path.relpath(path, cdst))
                if repo is None:
                    errs.append("%s: RUN uses %r, which is not copied into the image before this RUN" % (loc, t))
                    continue
                if not os.path.isfile(repo):
                    errs.append("%s: RUN uses %r, which does not exist in the repository (%s)"
                                % (loc, t, os.path.relpath(repo, root)))
                    continue
                as_command = i == 0 or tokens[i - 1] in ("&&", "||", ";", "|", "then", "else", "do", "exec", "!")
                if as_command and not os.access(repo, os.X_OK):
                    errs.append("%s: RUN runs %r, which is not executable (chmod +x %s)"
                                % (loc, t, os.path.relpath(repo, root)))
                if t.endswith("install_deps.sh"):
                    ran_install_deps = True
            for m in re.finditer(r"(?<![\w-])-D([A-Za-z_]\w*)=", cmd):
                name = m.group(1)
                if not name.startswith("CMAKE_") and name not in options:
                    errs.append("%s: RUN passes -D%s, which the top CMakeLists.txt does not declare "
                                "(known: %s)" % (loc, name, ", ".join(sorted(options))))
            for m in re.finditer(r"--target((?:\s+[^\s&|;]+)+)", cmd):
                for t in m.group(1).split():
                    if t.startswith("-"):
                        break
                    if t not in targets:
                        errs.append("%s: RUN builds --target %s, which no CMakeLists.txt defines" % (loc, t))
                built = True
            if "pyproject.toml" in cmd and "pip install" in cmd:
                pip_guarded = True
    for m in re.finditer(r"(?<![\w-])-D([A-Za-z_]\w*)=", args.get("CMAKE_ARGS", "")):
        if not m.group(1).startswith("CMAKE_") and m.group(1) not in options:
            errs.append("%s: ARG CMAKE_ARGS passes -D%s, which the top CMakeLists.txt does not declare"
                        % (where, m.group(1)))
    if not ran_install_deps:
        errs.append("%s: no RUN runs scripts/install_deps.sh (dependencies must come from it)" % where)
    if not built:
        errs.append("%s: no RUN builds with cmake --build ... --target" % where)
    if not pip_guarded:
        errs.append("%s: no RUN installs the Python package when pyproject.toml exists" % where)
    cmds = [rest for _, ins, rest in instrs if ins == "CMD"]
    if cmds:
        m = re.match(r'^\[\s*"([^"]+)"', cmds[-1])
        prog = m.group(1) if m else cmds[-1].split()[0]
        if prog not in programs | SYSTEM_PROGRAMS:
            errs.append("%s: CMD runs %r, which the image does not install" % (where, prog))
    for must in ("CMakeLists.txt", "src", "transport", "scripts/install_deps.sh", "cmake"):
        if ignored(must, patterns):
            errs.append("%s excludes %r, which the build needs" % (DOCKERIGNORE, must))
    return errs


# ---- Kubernetes manifests ----------------------------------------------------------------------

def load_manifests():
    import yaml
    docs = []
    kdir = os.path.join(ROOT, K8S_DIR)
    for name in sorted(os.listdir(kdir)):
        if not name.endswith((".yaml", ".yml")):
            continue
        rel = os.path.join(K8S_DIR, name)
        with open(os.path.join(ROOT, rel)) as f:
            try:
                for i, doc in enumerate(yaml.safe_load_all(f)):
                    if doc is not None:
                        docs.append(("%s[%d]" % (rel, i), doc))
            except yaml.YAMLError as e:
                docs.append(("%s" % rel, {"__yaml_error__": str(e)}))
    return docs


def is_crd_kind(doc):
    return str(doc.get("apiVersion", "")).startswith("kubeflow.org/")


def schema_versions():
    import kubernetes_validate.utils as u
    versions = u.all_versions()
    return [versions[0], versions[-1]]


def validate_schema(where, doc, errs):
    import kubernetes_validate
    import kubernetes_validate.utils as u
    for v in schema_versions():
        try:
            kubernetes_validate.validate(doc, v, strict=True)
        except u.SchemaNotFoundError as e:
            errs.append("%s: no Kubernetes %s schema for %s %s" % (where, v, doc.get("apiVersion"), doc.get("kind")))
            return
        except u.ValidationError as e:
            path = ".".join(str(p) for p in e.absolute_path) or "(top)"
            errs.append("%s: not a valid %s for Kubernetes %s at %s: %s" % (where, doc.get("kind"), v, path, e.message))


def env_map(container):
    return {e.get("name"): e for e in container.get("env", []) or []}


def env_value(container, name):
    e = env_map(container).get(name)
    return None if e is None else e.get("value")


def secret_ref(container, name="RINGFOLD_SECRET"):
    e = env_map(container).get(name) or {}
    return (e.get("valueFrom") or {}).get("secretKeyRef")


def check_rank_container(where, c, programs, errs, needs_secret=True, needs_seccomp=True):
    cmd = c.get("command") or []
    if not cmd:
        errs.append("%s: container %r has no command" % (where, c.get("name")))
    elif cmd[0] not in programs | SYSTEM_PROGRAMS:
        errs.append("%s: container %r runs %r, which the image (deploy/docker/Dockerfile) does not install"
                    % (where, c.get("name"), cmd[0]))
    if needs_secret:
        ref = secret_ref(c)
        if not ref or not ref.get("name") or not ref.get("key"):
            errs.append("%s: container %r must take RINGFOLD_SECRET from a Secret (valueFrom.secretKeyRef)"
                        % (where, c.get("name")))
    if needs_seccomp:
        prof = ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type")
        if prof not in ("Unconfined", "Localhost"):
            errs.append("%s: container %r runs ranks but leaves seccomp at the runtime default, which "
                        "blocks io_uring (set seccompProfile Unconfined or a Localhost profile)"
                        % (where, c.get("name")))


def check_schemas(docs=None):
    docs = load_manifests() if docs is None else docs
    errs, checked = [], 0
    programs = image_programs()
    services = {d.get("metadata", {}).get("name"): d for _, d in docs if d.get("kind") == "Service"}
    for where, doc in docs:
        if "__yaml_error__" in doc:
            errs.append("%s: not YAML: %s" % (where, doc["__yaml_error__"]))
            continue
        if is_crd_kind(doc):
            continue
        validate_schema(where, doc, errs)
        checked += 1
        if doc.get("kind") == "Job" and (doc.get("spec") or {}).get("completionMode") == "Indexed":
            check_indexed_job(where, doc, services, programs, errs)
    if checked == 0:
        errs.append("%s: no core Kubernetes object to validate" % K8S_DIR)
    return errs


def check_indexed_job(where, job, services, programs, errs):
    name = job["metadata"]["name"]
    spec = job["spec"]
    pod = spec["template"]["spec"]
    completions, parallelism = spec.get("completions"), spec.get("parallelism")
    if completions != parallelism:
        errs.append("%s: completions (%s) and parallelism (%s) must be equal: every rank runs at once"
                    % (where, completions, parallelism))
    sub = pod.get("subdomain")
    svc = services.get(sub)
    if svc is None:
        errs.append("%s: the pods' subdomain %r names no Service in %s" % (where, sub, K8S_DIR))
    else:
        sspec = svc.get("spec") or {}
        if sspec.get("clusterIP") != "None":
            errs.append("%s: Service %r must be headless (clusterIP: None) to give pods DNS names" % (where, sub))
        sel = sspec.get("selector") or {}
        if sel.get("job-name", sel.get("batch.kubernetes.io/job-name")) != name:
            errs.append("%s: Service %r does not select the Job's pods (selector job-name: %s)" % (where, sub, name))
    for c in pod.get("containers", []):
        check_rank_container(where, c, programs, errs)
        ws = env_value(c, "WORLD_SIZE")
        if ws is None or str(ws) != str(completions):
            errs.append("%s: WORLD_SIZE (%s) must equal completions (%s)" % (where, ws, completions))
        rank = (env_map(c).get("RANK") or {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
        if "batch.kubernetes.io/job-completion-index" not in rank:
            errs.append("%s: RANK must come from the pod's completion index (fieldRef to the "
                        "batch.kubernetes.io/job-completion-index annotation)" % where)
        addr = env_value(c, "MASTER_ADDR") or env_value(c, "RINGFOLD_STORE_ADDR") or ""
        if not addr.startswith("%s-0.%s" % (name, sub)):
            errs.append("%s: MASTER_ADDR %r must be pod 0's DNS name %s-0.%s" % (where, addr, name, sub))
        port = env_value(c, "MASTER_PORT") or env_value(c, "RINGFOLD_STORE_PORT")
        ports = {str(p.get("containerPort")) for p in c.get("ports", []) or []}
        if port is None or str(port) not in ports:
            errs.append("%s: MASTER_PORT %s is not one of the container's ports %s" % (where, port, sorted(ports)))
        for v in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            if env_value(c, v) is None:
                errs.append("%s: %s is not set (ringfold needs it when WORLD_SIZE > 1)" % (where, v))


# ---- CRD-typed manifests (MPIJob, PyTorchJob) ---------------------------------------------------

MPIJOB_SPEC = {"slotsPerWorker", "runPolicy", "mpiReplicaSpecs", "sshAuthMountPath", "mpiImplementation",
               "launcherCreationPolicy", "runLauncherAsWorker", "waitForWorkers"}
PYTORCHJOB_SPEC = {"runPolicy", "elasticPolicy", "pytorchReplicaSpecs", "nprocPerNode"}
REPLICA_SPEC = {"replicas", "template", "restartPolicy"}
RUN_POLICY = {"cleanPodPolicy", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit",
              "schedulingPolicy", "suspend", "managedBy"}
MPIRUN_ONE_ARG = {"-np", "-n", "--np", "-c", "-x", "--bind-to", "-bind-to", "--map-by", "-map-by", "--rank-by",
                  "-H", "--host", "-host", "--hostfile", "-hostfile", "--machinefile", "-machinefile",
                  "--npernode", "-npernode", "--wdir", "-wdir", "--prefix", "--output-filename", "-output-filename"}
MPIRUN_TWO_ARG = {"--mca", "-mca", "--gmca", "-gmca"}


def check_metadata(where, doc, api, kind, errs):
    if doc.get("apiVersion") != api:
        errs.append("%s: apiVersion must be %s, not %r" % (where, api, doc.get("apiVersion")))
    if doc.get("kind") != kind:
        errs.append("%s: kind must be %s" % (where, kind))
    name = (doc.get("metadata") or {}).get("name", "")
    if not re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", name) or len(name) > 50:
        errs.append("%s: metadata.name %r must be a DNS label of at most 50 characters "
                    "(operators append -launcher, -worker-N)" % (where, name))


def check_fields(where, obj, allowed, what, errs):
    if not isinstance(obj, dict):
        errs.append("%s: %s must be a mapping" % (where, what))
        return False
    for k in sorted(set(obj) - allowed):
        errs.append("%s: unknown field %s.%s (known: %s)" % (where, what, k, ", ".join(sorted(allowed))))
    return True


def check_replica(where, rname, rs, errs, require_containers=True):
    if not check_fields(where, rs, REPLICA_SPEC, "replicaSpecs." + rname, errs):
        return []
    r = rs.get("replicas")
    if not isinstance(r, int) or r < 1:
        errs.append("%s: %s.replicas must be a positive integer, not %r" % (where, rname, r))
    if rs.get("restartPolicy", "Never") not in ("Always", "OnFailure", "Never", "ExitCode"):
        errs.append("%s: %s.restartPolicy %r is not Always, OnFailure, Never or ExitCode"
                    % (where, rname, rs.get("restartPolicy")))
    tmpl = rs.get("template")
    if not isinstance(tmpl, dict):
        errs.append("%s: %s.template (a PodTemplateSpec) is required" % (where, rname))
        return []
    # The pod template inside the CRD, against the core schema.
    validate_schema("%s %s.template" % (where, rname),
                    {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"}, "template": tmpl}, errs)
    containers = (tmpl.get("spec") or {}).get("containers") or []
    if require_containers and not containers:
        errs.append("%s: %s.template has no containers" % (where, rname))
    return containers


def check_run_policy(where, spec, errs):
    rp = spec.get("runPolicy", {})
    if check_fields(where, rp, RUN_POLICY, "spec.runPolicy", errs):
        if rp.get("cleanPodPolicy", "Running") not in ("All", "Running", "None"):
            errs.append("%s: runPolicy.cleanPodPolicy %r is not All, Running or None" % (where, rp.get("cleanPodPolicy")))


def split_shell(cmd):
    """A container command as words: exec form as is, `sh -c SCRIPT` split like a shell would."""
    if len(cmd) >= 3 and cmd[0] in ("sh", "/bin/sh", "bash", "/bin/bash") and cmd[1] == "-c":
        lex = shlex.shlex(cmd[2], posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        return list(lex), cmd[2]
    return list(cmd), ""


def parse_mpirun(words):
    """(options, program argv) of the first mpirun in `words`, or (None, None)."""
    if "mpirun" not in words:
        return None, None
    i = words.index("mpirun") + 1
    opts = []
    while i < len(words) and words[i] not in ("&&", "||", ";", "|"):
        w = words[i]
        if w in MPIRUN_TWO_ARG:
            opts.append((w, words[i + 1:i + 3]))
            i += 3
        elif w in MPIRUN_ONE_ARG:
            opts.append((w, words[i + 1:i + 2]))
            i += 2
        elif w.startswith("-"):
            opts.append((w, []))
            i += 1
        else:
            end = i
            while end < len(words) and words[end] not in ("&&", "||", ";", "|"):
                end += 1
            return opts, words[i:end]
    return opts, []


def check_mpijob(where, doc, programs, errs):
    check_metadata(where, doc, "kubeflow.org/v2beta1", "MPIJob", errs)
    spec = doc.get("spec")
    if not check_fields(where, spec, MPIJOB_SPEC, "spec", errs):
        return
    check_run_policy(where, spec, errs)
    if spec.get("mpiImplementation", "OpenMPI") != "OpenMPI":
        errs.append("%s: mpiImplementation must be OpenMPI (the image's mpirun; ranks read OMPI_COMM_WORLD_*)" % where)
    slots = spec.get("slotsPerWorker", 1)
    if not isinstance(slots, int) or slots < 1:
        errs.append("%s: slotsPerWorker must be a positive integer" % where)
        slots = 1
    reps = spec.get("mpiReplicaSpecs")
    if not isinstance(reps, dict):
        errs.append("%s: spec.mpiReplicaSpecs is required" % where)
        return
    for k in sorted(set(reps) - {"Launcher", "Worker"}):
        errs.append("%s: mpiReplicaSpecs.%s is not Launcher or Worker" % (where, k))
    if "Launcher" not in reps or "Worker" not in reps:
        errs.append("%s: mpiReplicaSpecs needs both Launcher and Worker" % where)
        return
    launcher = check_replica(where, "Launcher", reps["Launcher"], errs)
    workers = check_replica(where, "Worker", reps["Worker"], errs)
    if reps["Launcher"].get("replicas") != 1:
        errs.append("%s: Launcher.replicas must be 1" % where)
    nworkers = reps["Worker"].get("replicas") or 0
    for c in workers:
        cmd = c.get("command") or []
        if not cmd or os.path.basename(cmd[0]) != "sshd":
            errs.append("%s: Worker container %r must run sshd (mpirun starts the ranks over ssh)" % (where, c.get("name")))
        check_rank_container(where, c, programs, errs, needs_secret=False)
    if not launcher:
        return
    c = launcher[0]
    words, script = split_shell(c.get("command") or [])
    opts, prog = parse_mpirun(words)
    if opts is None:
        errs.append("%s: the Launcher does not run mpirun" % where)
        return
    if not prog:
        errs.append("%s: mpirun starts no program" % where)
    elif prog[0] not in programs:
        errs.append("%s: mpirun starts %r, which the image (deploy/docker/Dockerfile) does not install" % (where, prog[0]))
    np = [v[0] for o, v in opts if o in ("-np", "-n", "--np", "-c") and v]
    if not np:
        errs.append("%s: mpirun has no -np" % where)
    elif np[0] != str(nworkers * slots):
        errs.append("%s: mpirun -np %s, but Worker.replicas x slotsPerWorker = %d" % (where, np[0], nworkers * slots))
    exported = {v[0] for o, v in opts if o == "-x" and v}
    defined = set(env_map(c)) | set(re.findall(r"(?:^|[\s;&|])([A-Z_][A-Z0-9_]*)=", script))
    for x in sorted(exported):
        name = x.split("=", 1)[0]
        if "=" not in x and name not in defined:
            errs.append("%s: mpirun -x %s, but the launcher never sets %s" % (where, name, name))
        if name == "RINGFOLD_SECRET" and "=" in x:
            errs.append("%s: mpirun -x RINGFOLD_SECRET=... puts the secret on a command line; pass the name only" % where)
    for need in ("RINGFOLD_SECRET", "RINGFOLD_STORE_ADDR"):
        if need not in {x.split("=", 1)[0] for x in exported}:
            errs.append("%s: mpirun must pass %s to the ranks (-x %s): Open MPI across hosts has no "
                        "store address or secret of its own" % (where, need, need))
    if not secret_ref(c):
        errs.append("%s: the Launcher must take RINGFOLD_SECRET from a Secret (valueFrom.secretKeyRef)" % where)


def check_pytorchjob(where, doc, programs, errs):
    check_metadata(where, doc, "kubeflow.org/v1", "PyTorchJob", errs)
    spec = doc.get("spec")
    if not check_fields(where, spec, PYTORCHJOB_SPEC, "spec", errs):
        return
    check_run_policy(where, spec, errs)
    nproc = spec.get("nprocPerNode")
    if nproc is not None and not isinstance(nproc, str):
        errs.append("%s: nprocPerNode must be a string (\"1\", \"auto\", ...)" % where)
    reps = spec.get("pytorchReplicaSpecs")
    if not isinstance(reps, dict) or "Master" not in reps:
        errs.append("%s: spec.pytorchReplicaSpecs needs a Master (rank 0, MASTER_ADDR)" % where)
        return
    for k in sorted(set(reps) - {"Master", "Worker"}):
        errs.append("%s: pytorchReplicaSpecs.%s is not Master or Worker" % (where, k))
    if reps["Master"].get("replicas") != 1:
        errs.append("%s: Master.replicas must be 1" % where)
    for rname in sorted(reps):
        containers = check_replica(where, rname, reps[rname], errs)
        main = [c for c in containers if c.get("name") == "pytorch"]
        if not main:
            errs.append("%s: %s has no container named 'pytorch' (the only one the operator configures)" % (where, rname))
            continue
        c = main[0]
        check_rank_container(where, c, programs, errs)
        if rname == "Master" and not any(p.get("name") == "pytorchjob-port" for p in c.get("ports", []) or []):
            errs.append("%s: the Master's pytorch container needs a port named pytorchjob-port (MASTER_PORT)" % where)
        if nproc == "1":
            for v, want in (("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "1")):
                if env_value(c, v) != want:
                    errs.append("%s: %s: one rank per pod needs %s=%s (the operator sets neither local "
                                "variable)" % (where, rname, v, want))


def check_crds(docs=None):
    docs = load_manifests() if docs is None else docs
    errs, seen = [], set()
    programs = image_programs()
    for where, doc in docs:
        if "__yaml_error__" in doc or not is_crd_kind(doc):
            continue
        kind = doc.get("kind")
        seen.add(kind)
        if kind == "MPIJob":
            check_mpijob(where, doc, programs, errs)
        elif kind == "PyTorchJob":
            check_pytorchjob(where, doc, programs, errs)
        else:
            errs.append("%s: %s %s is not a kind this check knows (MPIJob, PyTorchJob)" % (where, doc.get("apiVersion"), kind))
    if not seen:
        errs.append("%s: no MPIJob or PyTorchJob manifest found" % K8S_DIR)
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=["schemas", "crds", "dockerfile", "selftest", "all"])
    a = ap.parse_args()
    if a.check != "dockerfile":
        need_packages()
    errs = []
    if a.check in ("schemas", "all"):
        errs += check_schemas()
    if a.check in ("crds", "all"):
        errs += check_crds()
    if a.check in ("dockerfile", "all"):
        errs += check_dockerfile()
    if a.check in ("selftest", "all"):
        from check_deploy_selftest import selftest  # deploy/, beside this file
        errs += selftest()
    for e in errs:
        print(e)
    if errs:
        print("check_deploy.py %s: %d problem(s)" % (a.check, len(errs)))
        return 1
    extra = ""
    if a.check in ("schemas", "crds", "all"):
        extra = " (Kubernetes schemas %s)" % " and ".join(schema_versions())
    print("check_deploy.py %s: OK%s" % (a.check, extra))
    return 0


if __name__ == "__main__":
    sys.exit(main())
