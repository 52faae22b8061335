"""Self-test of deploy/check_deploy.py: breaks each manifest and the Dockerfile on purpose, one
fault at a time, and expects the check to name it, so a check that silently accepts everything
fails here. Run as `check_deploy.py selftest` (tests/deploy: deploy_selftest)."""
import copy

import check_deploy as c


def selftest():
    docs = c.load_manifests()
    dockerfile = c.read(c.DOCKERFILE)
    failures = []

    def find(kind):
        for i, (w, d) in enumerate(docs):
            if d.get("kind") == kind:
                return i
        raise SystemExit("selftest: no %s manifest" % kind)

    def mutated(kind, change):
        out = copy.deepcopy(docs)
        i = find(kind)
        change(out[i][1])
        return out

    def expect(name, errs, substring):
        if not any(substring in e for e in errs):
            failures.append("selftest: %s was not caught (wanted an error containing %r; got %r)" % (name, substring, errs))

    def job_container(d):
        return d["spec"]["template"]["spec"]["containers"][0]

    def set_env(c, name, value):
        for e in c["env"]:
            if e["name"] == name:
                e.clear()
                e.update({"name": name, "value": value})

    expect("a misspelled container field", c.check_schemas(mutated("Job", lambda d: job_container(d).update(
        {"imagePullPolice": "Always"}))), "imagePullPolice")
    expect("a string where an integer belongs", c.check_schemas(mutated("Job", lambda d: d["spec"].update(
        {"backoffLimit": "none"}))), "backoffLimit")
    expect("WORLD_SIZE != completions", c.check_schemas(mutated("Job", lambda d: set_env(job_container(d), "WORLD_SIZE", "5"))),
           "WORLD_SIZE")
    expect("a secret given in clear", c.check_schemas(mutated("Job", lambda d: set_env(job_container(d), "RINGFOLD_SECRET", "x"))),
           "RINGFOLD_SECRET")
    expect("a program the image lacks", c.check_schemas(mutated("Job", lambda d: job_container(d).update(
        {"command": ["nccl_allreduce"]}))), "does not install")
    expect("a Service that is not headless", c.check_schemas(mutated("Service", lambda d: d["spec"].pop("clusterIP"))),
           "headless")
    expect("an MPIJob without workers", c.check_crds(mutated("MPIJob", lambda d: d["spec"]["mpiReplicaSpecs"].pop("Worker"))),
           "Worker")
    expect("an unknown MPIJob field", c.check_crds(mutated("MPIJob", lambda d: d["spec"].update({"slotPerWorker": 2}))),
           "slotPerWorker")
    expect("mpirun -np != workers x slots", c.check_crds(mutated("MPIJob", lambda d: d["spec"].update({"slotsPerWorker": 3}))),
           "-np")
    expect("a bad pod field inside an MPIJob", c.check_crds(mutated("MPIJob", lambda d: d["spec"]["mpiReplicaSpecs"]["Worker"]
                                                                     ["template"]["spec"].update({"hostNetworking": True}))),
           "hostNetworking")
    expect("a PyTorchJob container the operator ignores",
           c.check_crds(mutated("PyTorchJob", lambda d: d["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
                              ["containers"][0].update({"name": "main"}))), "pytorch")
    expect("a PyTorchJob running a missing program",
           c.check_crds(mutated("PyTorchJob", lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
                              ["containers"][0].update({"command": ["/opt/nothing/bin/train"]}))), "does not install")
    expect("a wrong apiVersion", c.check_crds(mutated("PyTorchJob", lambda d: d.update({"apiVersion": "kubeflow.org/v2"}))),
           "apiVersion")
    expect("a COPY of a missing file", c.check_dockerfile(dockerfile.replace(
        "COPY scripts/install_deps.sh", "COPY scripts/install_all.sh")), "does not exist")
    expect("an unknown CMake option", c.check_dockerfile(dockerfile.replace(
        "-DRINGFOLD_BUILD_TESTS=OFF", "-DRINGFOLD_BUILD_TEST=OFF")), "RINGFOLD_BUILD_TEST")
    expect("a script run before it is copied", c.check_dockerfile(dockerfile.replace(
        "COPY scripts/install_deps.sh scripts/install_deps.sh\n", "")), "not copied")
    expect("an unknown build target", c.check_dockerfile(dockerfile.replace(
        'RINGFOLD_PROGRAMS="ringfoldrun', 'RINGFOLD_PROGRAMS="ringfold_run')), "ringfold_run")
    expect("another base image", c.check_dockerfile(dockerfile.replace("FROM debian:12", "FROM ubuntu:24.04")), "Debian 12")
    return failures
