# Sourced by the scripts that build Kubernetes commands (build-control-plane.sh,
# build-node.sh): the linker flags that give a binary its real version, so that
# /version, helm's kubeVersion checks and the node's kubeletVersion are right.
# Needs KUBE_VERSION (versions.env); sets kube_ldflags.
kube_minor=${KUBE_VERSION#*.}
kube_minor=${kube_minor%%.*}
kube_ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=v$KUBE_VERSION -X $pkg.gitMajor=${KUBE_VERSION%%.*} -X $pkg.gitMinor=$kube_minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
