package coordinator

// CachedLogins is how many SSH logins the server holds in memory.
func (s *Server) CachedLogins() int { return s.logins.len() }
