# fmtfs in a container.  FUSE needs the device and the capability:
#   docker build -t fmtfs .
#   docker run --rm -it --device /dev/fuse --cap-add SYS_ADMIN \
#       -v /var/lib/app-data:/data:ro fmtfs sh -c 'fmtfs mount /data /mnt && ls -l /mnt'
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends fuse3 libfuse3-dev pkg-config gcc \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/fmtfs
COPY pyproject.toml README.md ./
COPY fmtfs ./fmtfs
COPY pyspark_fmtfs ./pyspark_fmtfs
COPY scripts/constraints.txt ./scripts/
# the versions the test suite ran with (scripts/constraints.txt)
RUN pip install --no-cache-dir -c scripts/constraints.txt . \
    && apt-get purge -y gcc libfuse3-dev pkg-config && apt-get autoremove -y

ENTRYPOINT []
CMD ["fmtfs", "--help"]
