# coalesce-server image. The build stage installs and builds exactly as CI
# does (scripts/install-deps.sh, scripts/build.sh); the runtime stage holds
# the server, the `coalesce` CLI and the packages of the shared libraries they
# link, found with ldd and dpkg -S (scripts/image-files.sh) so that the list
# cannot drift. At build time the runtime stage dlopens every library the
# server can load, the optional ones included, and fails if one is missing.
#
# One build command per variant (docs/DEPLOY.md):
#   CPU, Debian 12:
#     DOCKER_BUILDKIT=1 docker build --build-arg GIT_SHA=$(git rev-parse HEAD) \
#       -t coalesce-server:cpu .
#   GPU, NVIDIA's CUDA 13 images (Ubuntu 24.04; the CUDA runtime is linked
#   statically, cuBLASLt and CUPTI are dlopened from the runtime image):
#     DOCKER_BUILDKIT=1 docker build --build-arg GIT_SHA=$(git rev-parse HEAD) \
#       --build-arg BUILD_IMAGE=nvidia/cuda:13.0.0-devel-ubuntu24.04 \
#       --build-arg RUNTIME_IMAGE=nvidia/cuda:13.0.0-runtime-ubuntu24.04 \
#       --build-arg EXTRA_PACKAGES=cuda-cupti-13-0 \
#       --build-arg "OPTIONAL_LIBRARIES=libcublasLt.so.13 libcupti.so.13 libnvperf_host.so" \
#       -t coalesce-server:gpu .
# BINARIES=prebuilt packages binaries already built on a host of the same
# distribution, staged in .prebuilt/ by scripts/image-files.sh (CI does this:
# scripts/container-test.sh) instead of building them here.
ARG BUILD_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim
ARG BINARIES=build

FROM ${BUILD_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
# Dependencies first: this layer survives source edits.
COPY scripts/install-deps.sh scripts/
RUN scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
# The commit being built (.git is not in the context).
ARG GIT_SHA=unknown
ARG OPTIONAL_LIBRARIES=""
# The build tree lives in a cache mount, so a rebuild after a source edit
# compiles only what changed; one per build image, so that the CPU and GPU
# variants never share a tree.
ARG BUILD_IMAGE
RUN --mount=type=cache,target=/build,id=coalesce-build-${BUILD_IMAGE} \
    COALESCE_GIT_SHA="${GIT_SHA}" BUILD_DIR=/build \
      TARGETS="coalesce-server coalesce-cli" scripts/build.sh \
    && OPTIONAL_LIBRARIES="${OPTIONAL_LIBRARIES}" \
       scripts/image-files.sh /build /out

FROM scratch AS prebuilt
COPY .prebuilt/ /out/

FROM ${BINARIES} AS binaries

FROM ${RUNTIME_IMAGE} AS runtime
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Packages beyond the linked libraries' (GPU: cuda-cupti-13-0, which the
# CUDA runtime image lacks).
ARG EXTRA_PACKAGES=""
COPY --from=binaries /out/runtime-packages.txt /tmp/
RUN apt-get update -qq \
    && { cat /tmp/runtime-packages.txt; printf '%s\n' ${EXTRA_PACKAGES}; } \
       | xargs apt-get install -y -qq --no-install-recommends \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin \
              /var/cache/apt/archives/*.deb \
              /var/log/apt /var/log/dpkg.log /tmp/runtime-packages.txt
# CUPTI installs outside the loader's default path.
RUN if [ -d /usr/local/cuda/extras/CUPTI/lib64 ]; then \
      echo /usr/local/cuda/extras/CUPTI/lib64 > /etc/ld.so.conf.d/cupti.conf \
      && ldconfig; \
    fi
COPY --from=binaries /out/coalesce-server /out/coalesce \
     /out/coalesce-dlopen-check /usr/local/bin/
COPY --from=binaries /out/libraries.txt /usr/local/share/coalesce/
# Shipped selection tables, measured by `scripts/gpu-check.sh OUT tune`
# (used on a device of the same name; see docs/SELECTION.md).
COPY deploy/tuning/ /usr/local/share/coalesce/tuning/
# Fails the build if any library the server can load is missing.
RUN coalesce-dlopen-check -f /usr/local/share/coalesce/libraries.txt
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin \
      coalesce
USER 10001:10001
# Idle OpenMP workers of the CPU backend sleep instead of spinning.
ENV OMP_WAIT_POLICY=passive
# gRPC, Prometheus /metrics.
EXPOSE 50051 9464
# The gRPC health service (grpc.health.v1) on COALESCE_HEALTH_PORT (set it
# when --listen names another port). A server started with TLS or tokens
# needs its own check (docs/DEPLOY.md).
ENV COALESCE_HEALTH_PORT=50051
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
  CMD coalesce --server="localhost:${COALESCE_HEALTH_PORT}" --timeout_s=4 \
      health || exit 1
ARG VERSION=0.1.0
ARG GIT_SHA=unknown
# The repository URL (no remote is assumed): --build-arg SOURCE=URL.
ARG SOURCE=""
LABEL org.opencontainers.image.title="coalesce-server" \
      org.opencontainers.image.description="Coalesce tensor-ops gRPC server and the coalesce CLI" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${GIT_SHA}" \
      org.opencontainers.image.source="${SOURCE}"
ENTRYPOINT ["/usr/local/bin/coalesce-server"]
CMD ["--listen=0.0.0.0:50051", "--metrics_listen=0.0.0.0:9464"]
