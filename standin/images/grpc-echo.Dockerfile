# devop.test/grpc-echo: standin/images/grpc-echo.mjs (a gRPC server, or with `client` a gRPC client) bundled with
# @grpc/grpc-js into one file by esbuild, run by plain node. Build from the repository root:
# docker build -f standin/images/grpc-echo.Dockerfile -t devop.test/grpc-echo .
FROM node:24-bookworm-slim AS build
# Build-time only (scripts/images.mjs passes the host's CA bundle as a mounted file): npm ci behind a TLS-inspecting
# proxy. Neither is kept in the image.
ARG NODE_EXTRA_CA_CERTS
ARG NPM_CONFIG_REGISTRY
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY standin/images/grpc-echo.mjs ./standin/images/grpc-echo.mjs
RUN npx esbuild standin/images/grpc-echo.mjs --bundle --platform=node --target=node24 --format=esm \
      --banner:js="import { createRequire } from 'node:module'; const require = createRequire(import.meta.url);" \
      --outfile=/out/grpc-echo.mjs

FROM node:24-bookworm-slim
COPY --from=build /out/grpc-echo.mjs /app/grpc-echo.mjs
EXPOSE 50051
ENTRYPOINT ["node", "/app/grpc-echo.mjs"]
