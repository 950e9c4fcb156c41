# Sourced by the image scripts: buildah on the project's own storage
# (.cache/images/storage), overlay where the kernel allows it, vfs elsewhere.
# Defines bah: an array (for timeout and exec) and a function of the same name.
images_cache="${JOBFLEET_CACHE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.cache}/images"
mkdir -p "$images_cache/storage"
if [ -z "${BUILDAH_DRIVER:-}" ]; then
  if [ -f "$images_cache/storage/driver" ]; then
    BUILDAH_DRIVER=$(cat "$images_cache/storage/driver")
  else
    probe=$(mktemp -d)
    mkdir -p "$probe"/{l,u,w,m}
    if mount -t overlay overlay -o "lowerdir=$probe/l,upperdir=$probe/u,workdir=$probe/w" "$probe/m" 2>/dev/null; then
      umount "$probe/m"; BUILDAH_DRIVER=overlay
    else
      BUILDAH_DRIVER=vfs
    fi
    rm -rf "$probe"
  fi
fi
bah=(buildah --root "$images_cache/storage/$BUILDAH_DRIVER" --runroot /run/jobfleet-buildah --storage-driver "$BUILDAH_DRIVER")
bah() { "${bah[@]}" "$@"; }
