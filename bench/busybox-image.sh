# Sourced by the docker benchmarks: busybox_image IMAGE WORKDIR imports
# IMAGE into the local Docker engine from this machine's busybox-static
# (every applet a relative link to it), unless the engine has it already.
# No image is pulled.
busybox_image() {
	local img=$1 work=$2 busybox
	docker image inspect "$img" >/dev/null 2>&1 && return 0
	busybox=$(command -v busybox) || { echo "install busybox-static" >&2; return 1; }
	mkdir -p "$work/rootfs/bin" "$work/rootfs/tmp"
	cp "$busybox" "$work/rootfs/bin/busybox"
	# Relative links: `busybox --install -s` would point them at this
	# machine's path of busybox, which is not in the image.
	(cd "$work/rootfs/bin" && for a in $("$busybox" --list); do [ "$a" = busybox ] || ln -s busybox "$a"; done)
	tar -C "$work/rootfs" -c . | docker import - "$img" >/dev/null
	rm -rf "$work/rootfs"
}
