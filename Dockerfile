# The images: the operator (the default target) and the example worker.
# Multi-stage: compile with the dev toolchain, ship only the compiled code and
# production dependencies; run as non-root.
#   docker build -t ghcr.io/jobfleet/operator:0.1.0 .
#   docker build --target example-worker -t registry.example.com/shipping/order-worker:1.0.0 .
# `make images` builds both with buildah, no Docker engine (test/ground/build-images.sh).
# BASE_IMAGE: any image with Node 24 and npm at /usr/local and a uid 1000 (the official one by
# default; the test ground builds the same from Debian's packages where Docker Hub is out of reach).
ARG BASE_IMAGE=node:24-bookworm-slim
FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY package.json package-lock.json ./
# the worker library is an npm workspace: npm ci needs its package.json
COPY worker/package.json ./worker/
# npm's settings (a private registry, its CA) come as build secrets, never as a layer:
#   --secret id=npmrc,src=$HOME/.npmrc [--secret id=npm-ca,src=ca.pem]
RUN --mount=type=secret,id=npmrc,target=/root/.npmrc --mount=type=secret,id=npm-ca \
    npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY worker ./worker
COPY examples/worker ./examples/worker
RUN npx tsc -p tsconfig.build.json && npm prune --omit=dev

FROM ${BASE_IMAGE} AS runtime
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
# the image's "node" user; the chart's securityContext also requires non-root
USER 1000:1000

# examples/worker/worker.ts on @jobfleet/worker: what a team's worker image looks like
FROM runtime AS example-worker
# /metrics, /healthz, /readyz (JOBFLEET_METRICS_PORT)
EXPOSE 9464
ENTRYPOINT ["node", "dist/examples/worker/worker.js"]

FROM runtime AS operator
COPY crds ./crds
EXPOSE 8080
ENTRYPOINT ["node", "dist/src/main.js"]
