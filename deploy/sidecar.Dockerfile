# A sidecar-only image: trainprobe's base install, no torch, no Ray
# (46.5 MiB of packages, measured in a fresh venv by bench/bench_install.py;
# docs/PERFORMANCE.md#install-size). Build from the repository root:
#
#   docker build -f deploy/sidecar.Dockerfile -t trainprobe-sidecar .
#
# deploy/k8s-job.yaml runs it as a native sidecar. For KubeRay the sidecar
# joins Ray as a driver, so it runs from the training image instead (which
# has trainprobe[ray]); see deploy/kuberay-raycluster.yaml.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY proto ./proto
COPY hooks ./hooks
COPY sidecar ./sidecar
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && mkdir -p /var/run/trainprobe /var/lib/trainprobe \
    && chown 1000:1000 /var/run/trainprobe /var/lib/trainprobe
# The training container must run as the same UID, so that the sidecar may
# signal its processes (or give this container CAP_KILL and run the sidecar
# with --socket-access all: docs/DEPLOY.md); reading a stopped rank's stacks
# with py-spy needs the SYS_PTRACE capability on this container. An emptyDir
# mounted on /var/run/trainprobe is root's and 0777: the sidecar then listens
# in its own trainprobe-1000/ inside it.
USER 1000:1000
ENV TRAINPROBE_RUNTIME_DIR=/var/run/trainprobe \
    TRAINPROBE_STATE_DIR=/var/lib/trainprobe
# The TCP listener: token-protected, except the gRPC health service
# (kubelet probes send no token).
EXPOSE 7070
ENTRYPOINT ["trainprobe-sidecar"]
