# The operator image. Multi-stage: compile with the dev toolchain, ship only
# the compiled code, production dependencies and the CRDs; run as non-root.
#   docker build -t ghcr.io/jobfleet/operator:0.1.0 .
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
COPY worker ./worker
COPY examples/worker ./examples/worker
RUN npx tsc -p tsconfig.build.json && npm prune --omit=dev

FROM node:24-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules ./node_modules
COPY --from=build /src/dist ./dist
COPY crds ./crds
# the image's "node" user; the chart's securityContext also requires non-root
USER 1000:1000
EXPOSE 8080
ENTRYPOINT ["node", "dist/src/main.js"]
