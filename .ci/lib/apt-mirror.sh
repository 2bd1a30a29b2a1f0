# apt_mirror SUITE prints the Debian archive this machine's apt
# configuration installs SUITE from (or, on Debian, its own release from),
# without a trailing slash, or nothing. Sourced by the setup.d scripts that
# debootstrap images, so a corporate mirror works and no host is named here.
apt_mirror() {
	local own
	own=$(. /etc/os-release && if [ "${ID:-}" = debian ]; then echo "${VERSION_CODENAME:-}"; fi)
	apt-get indextargets --format '$(REPO_URI) $(RELEASE)' 'Created-By: Packages' 2>/dev/null |
		awk -v s="$1" -v o="$own" '
			$2 == s { print $1; found = 1; exit }
			o != "" && $2 == o && fb == "" { fb = $1 }
			END { if (!found && fb != "") print fb }' |
		sed 's#/*$##'
}
