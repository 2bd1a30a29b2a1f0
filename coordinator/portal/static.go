package portal

import (
	"io/fs"
	"net/http"
	"path"
)

// staticTypes are the content types of the files the static directory
// serves, by extension; other files are not served.
var staticTypes = map[string]string{
	".css": "text/css; charset=utf-8",
	".js":  "text/javascript; charset=utf-8",
}

// serveStatic serves a file of the embedded static directory.
func serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	typ, ok := staticTypes[path.Ext(name)]
	if !ok || !fs.ValidPath(name) {
		http.NotFound(w, r)
		return
	}
	if _, err := fs.Stat(assets, "static/"+name); err != nil {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", typ)
	w.Header().Set("Cache-Control", "max-age=3600")
	http.ServeFileFS(w, r, assets, "static/"+name)
}
