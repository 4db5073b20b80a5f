# devop.test/http-echo: answers every request with JSON naming the pod and echoing the request (PORT, default 8080;
# LISTEN_HOST, default 0.0.0.0; POD_NAME). Build from the repository root:
# docker build -f standin/images/http-echo.Dockerfile .
FROM node:24-bookworm-slim
COPY standin/images/http-echo.mjs /app/http-echo.mjs
EXPOSE 8080
ENTRYPOINT ["node", "/app/http-echo.mjs"]
