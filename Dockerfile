# attn-server image (CPU). Two stages: the build stage compiles a Release of
# the server and attnctl from Debian bookworm's dev packages; the runtime
# stage starts from scratch and holds only what the binaries load: the
# dynamic loader, the shared-library closure the loader walks from the
# binaries and the SentencePiece plugin (OpenBLAS included, so matrix
# products do not fall back to reference BLAS), the binaries and the bundled
# models. Debian's libtorch_cpu also lists OpenCV and FFmpeg (with Qt, GDAL
# and codecs behind them) although it takes no symbol from them: each is
# replaced by an empty library of the same name (scripts/image/runtime_rootfs.py),
# which keeps the image at 282 MB instead of 1.4 GB. There is no shell,
# no package manager and no setuid file; the server runs as user attn
# (10001). scripts/image/verify_image.sh builds the image and checks all of that.
#
#   docker build -t attn-server .
#   docker run --rm -p 50051:50051 -p 8000:8000 -p 9090:9090 attn-server
#
# Every server flag is also an environment variable ATTN_<FLAG>: ATTN_MODELS,
# ATTN_DEFAULT_MODEL, ATTN_PORT, ATTN_HTTP_PORT, ATTN_METRICS_PORT, ATTN_THREADS, ATTN_DEVICE,
# ATTN_MAX_ACTIVE, ATTN_MAX_WAITING, ATTN_MAX_PROMPT_TOKENS, ATTN_MAX_TOKENS,
# ATTN_DEFAULT_MAX_TOKENS, ATTN_PREFILL_CHUNK, ATTN_STREAM_BUFFER,
# ATTN_SHUTDOWN_GRACE_SECONDS, ATTN_STATE_CACHE, ATTN_STATE_CACHE_BYTES. The
# CUDA variant is Dockerfile.cuda.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      build-essential cmake ninja-build pkg-config \
      libtorch-dev libopenblas0-openmp libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev \
      protobuf-compiler libabsl-dev prometheus-cpp-dev libsentencepiece-dev nlohmann-json3-dev libssl-dev \
      zlib1g-dev libboost-dev libhiredis-dev libicu-dev \
      python3 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY util util
COPY model model
COPY train train
COPY generate generate
COPY export export
COPY proto proto
COPY server server
COPY client client
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTN_BUILD_TESTS=OFF \
      -DATTN_BUILD_BENCHMARKS=OFF -DATTN_WERROR=OFF \
 && cmake --build /build --target attn-server attnctl attn_sentencepiece \
 && strip /build/server/attn-server /build/client/attnctl /build/model/text/libattn_sentencepiece.so
COPY scripts/image/runtime_rootfs.py scripts/
COPY models models
RUN python3 scripts/image/runtime_rootfs.py /rootfs /build/server/attn-server /build/client/attnctl \
      --plugin /build/model/text/libattn_sentencepiece.so --models models

FROM scratch
COPY --from=build /rootfs /
ENV PATH=/opt/attn/bin \
    ATTN_MODELS=/opt/attn/models \
    ATTN_DEFAULT_MODEL=rwkv7 \
    ATTN_HOST=0.0.0.0 \
    ATTN_PORT=50051 \
    ATTN_HTTP_PORT=8000 \
    ATTN_METRICS_PORT=9090 \
    ATTN_THREADS=0 \
    ATTN_SHUTDOWN_GRACE_SECONDS=30
USER 10001:10001
EXPOSE 50051 8000 9090
# The standard gRPC health service, through attnctl (no extra tool needed).
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["attnctl", "--server=127.0.0.1:50051", "--timeout_s=4", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["attn-server"]
