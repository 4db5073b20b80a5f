# The stand-in's shell image (devop.test/shell, also tagged docker.io/library/busybox:latest): Node 24 on Debian with
# busybox's applets for whatever the base lacks (nc, wget, ps, ip, ping …). Tests run `sh -c`, `sleep`, `test -f` and
# `node -e` in it. Build from the repository root: docker build -f standin/images/shell.Dockerfile .
FROM node:24-bookworm-slim
# Links only the applets that no Debian command already provides: sh, cat, sleep … stay Debian's.
RUN apt-get update \
 && apt-get install -y --no-install-recommends busybox \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && for applet in $(busybox --list); do \
      command -v "$applet" >/dev/null || ln -s /bin/busybox "/usr/local/bin/$applet"; \
    done
CMD ["/bin/sh"]
