package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/crabbox-dev/crabbox/coordinator/store"
	"github.com/crabbox-dev/crabbox/coordinator/store/postgres"
	"github.com/crabbox-dev/crabbox/coordinator/store/storetest"
	"github.com/crabbox-dev/crabbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, nil, postgresTests) }

// postgresTests need a PostgreSQL server.
var postgresTests = &testenv.Group{Name: "PostgreSQL store", Enable: "bash .ci/setup.d/20-postgres.sh as root, then export CRABBOX_TEST_POSTGRES=<the URL it prints>"}

// testDSN returns the DSN of the test database (see
// .ci/setup.d/20-postgres.sh), skipping the test when it is not set and
// failing it in CI.
func testDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("CRABBOX_TEST_POSTGRES")
	if dsn != "" {
		return dsn
	}
	postgresTests.Skip(t, "CRABBOX_TEST_POSTGRES is not set")
	return ""
}

// freshSchema creates an empty schema for t, dropped when t ends, and
// returns dsn with search_path set to it.
func freshSchema(t *testing.T, dsn string) string {
	t.Helper()
	b := make([]byte, 6)
	rand.Read(b)
	schema := "crabbox_test_" + hex.EncodeToString(b)
	admin, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	})
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	return withSearchPath(t, dsn, schema)
}

func withSearchPath(t *testing.T, dsn, schema string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatalf("CRABBOX_TEST_POSTGRES is not a valid URL")
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}

func TestConformance(t *testing.T) {
	dsn := testDSN(t)
	storetest.Run(t, storetest.Harness{Database: func(t *testing.T) storetest.Opener {
		schemaDSN := freshSchema(t, dsn)
		return func(t *testing.T) store.Store {
			s, err := postgres.Open(context.Background(), schemaDSN)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
			})
			return s
		}
	}})
}

func TestOpenErrorsHideThePassword(t *testing.T) {
	const secret = "s3cret-pa55word"
	s, err := postgres.Open(context.Background(), "postgres://crabbox:"+secret+"@127.0.0.1:1/nowhere?sslmode=disable&connect_timeout=2")
	if err == nil {
		s.Close()
		t.Fatal("Open of an unreachable database succeeded")
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error leaks the password: %v", err)
	}
}
