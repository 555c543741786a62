# The baton image: /baton, the lean build that runs in every pod (baton serve
# on an external etcd, run, locks, install; the entrypoint), /baton-dapr, the
# same with Dapr's lock API (the sidecar of pods annotated baton.dev/dapr),
# and /baton-controller, the full build the controller runs (baton mirror).
# Build with `make docker-image` (a docker engine and registry access);
# `make image` writes the same image without either. test/image checks that
# the two agree.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY clients/go ./clients/go
RUN go mod download
COPY api ./api
COPY cmd ./cmd
COPY internal ./internal
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -tags lean -ldflags "-s -w -X github.com/baton-dev/baton/internal/version.version=${VERSION} -X github.com/baton-dev/baton/internal/version.commit=${COMMIT}" -o /baton ./cmd/sidecar
RUN CGO_ENABLED=0 go build -trimpath -tags lean,dapr -ldflags "-s -w -X github.com/baton-dev/baton/internal/version.version=${VERSION} -X github.com/baton-dev/baton/internal/version.commit=${COMMIT}" -o /baton-dapr ./cmd/sidecar
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/baton-dev/baton/internal/version.version=${VERSION} -X github.com/baton-dev/baton/internal/version.commit=${COMMIT}" -o /baton-controller ./cmd/sidecar

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /baton /baton
COPY --from=build /baton-dapr /baton-dapr
COPY --from=build /baton-controller /baton-controller
USER 65532:65532
ENTRYPOINT ["/baton"]
