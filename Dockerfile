# syntax=docker/dockerfile:1
# coalesce-server image. The build stage installs and builds exactly as CI
# does (scripts/install-deps.sh, scripts/build.sh); the runtime stage holds
# the server, the `coalesce` CLI and the packages of the shared libraries they
# link, found with ldd and dpkg -S so that the list cannot drift.
#
# Default: Debian 12 and the CPU backend (Debian ships no CUDA toolkit). For
# the CUDA backend, build on NVIDIA's images (Ubuntu 24.04, which
# install-deps.sh supports; the CUDA runtime is linked statically):
#   docker build \
#     --build-arg BUILD_IMAGE=nvidia/cuda:12.6.3-devel-ubuntu24.04 \
#     --build-arg RUNTIME_IMAGE=nvidia/cuda:12.6.3-base-ubuntu24.04 \
#     -t coalesce-server .
ARG BUILD_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim

FROM ${BUILD_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
# Dependencies first: this layer survives source edits.
COPY scripts/install-deps.sh scripts/
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# The commit being built (.git is not in the context):
#   docker build --build-arg GIT_SHA=$(git rev-parse --short HEAD) ...
ARG GIT_SHA=unknown
RUN COALESCE_GIT_SHA="${GIT_SHA}" BUILD_DIR=/build \
      TARGETS="coalesce-server coalesce-cli" scripts/build.sh
# The package of every shared library the two binaries load.
RUN ldd /build/server/coalesce-server /build/client/coalesce \
      | awk '/=> \// {print $3}' | sort -u \
      | while read -r lib; do \
          dpkg -S "*/$(basename "$(dirname "$lib")")/*$(basename "$lib")" \
            | cut -d: -f1 | tr ',' '\n' | tr -d ' '; \
        done | sort -u > /build/runtime-packages.txt \
    && cat /build/runtime-packages.txt

FROM ${RUNTIME_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=build /build/runtime-packages.txt /tmp/
RUN apt-get update -qq \
    && xargs -a /tmp/runtime-packages.txt \
         apt-get install -y -qq --no-install-recommends \
    && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt
COPY --from=build /build/server/coalesce-server /build/client/coalesce \
     /usr/local/bin/
# Shipped selection tables, measured by `scripts/gpu-check.sh OUT tune`
# (used on a device of the same name; see docs/SELECTION.md).
COPY deploy/tuning/ /usr/local/share/coalesce/tuning/
# Fails the build if any shared library is missing.
RUN missing=$(ldd /usr/local/bin/coalesce-server /usr/local/bin/coalesce \
                | grep "not found" || true); \
    test -z "$missing" || { echo "$missing"; exit 1; }
RUN useradd --system --no-create-home --shell /usr/sbin/nologin coalesce
USER coalesce
# Idle OpenMP workers of the CPU backend sleep instead of spinning.
ENV OMP_WAIT_POLICY=passive
# gRPC, Prometheus /metrics.
EXPOSE 50051 9464
ENTRYPOINT ["/usr/local/bin/coalesce-server"]
CMD ["--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464"]
