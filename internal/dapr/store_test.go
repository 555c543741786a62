package dapr

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

func TestStoreKey(t *testing.T) {
	def := DefaultStores()[0]
	named := Store{Name: "orders-locks", Prefix: "dapr", KeyPrefix: KeyPrefixName}
	none := Store{Name: "lockstore", Prefix: "dapr", KeyPrefix: KeyPrefixNone}
	custom := Store{Name: "lockstore", Prefix: "team-a/locks", KeyPrefix: "billing"}
	for _, tt := range []struct {
		store    Store
		app, res string
		want     string
	}{
		{def, "orders", "job-1", "dapr/orders/job-1"},
		{def, "", "job-1", "dapr/job-1"}, // no app id, no scoping (as daprd)
		{named, "orders", "job-1", "dapr/orders-locks/job-1"},
		{none, "orders", "job-1", "dapr/job-1"},
		{custom, "orders", "job-1", "team-a/locks/billing/job-1"},
		{def, "orders", "order:42", "dapr/orders/order_3A42"},
		{def, "orders", "tenant/a", "dapr/orders/tenant_2Fa"},
		{def, "orders", "a_b", "dapr/orders/a_5Fb"},
		{def, "orders", "v1.2", "dapr/orders/v1.2"},
		{def, "orders", ".", "dapr/orders/_2E"},
		{def, "orders", "..", "dapr/orders/_2E_2E"},
		{def, "orders", "é x", "dapr/orders/_C3_A9_20x"},
		{def, "my app", "r", "dapr/my_20app/r"},
	} {
		k, err := tt.store.Key(tt.app, tt.res)
		if err != nil || k.String() != tt.want {
			t.Errorf("%v Key(%q, %q) = %q, %v; want %q", tt.store, tt.app, tt.res, k, err, tt.want)
		}
	}
	for _, tt := range []struct {
		res, want string
	}{
		{"a||b", "can't contain '||'"},
		{strings.Repeat("x", 129), "129 bytes once escaped"},
		{strings.Repeat(":", 43), "129 bytes once escaped"},
	} {
		if _, err := def.Key("app", tt.res); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Key(%.20q): %v; want an error saying %q", tt.res, err, tt.want)
		}
	}
}

// TestSegmentIsInjective: two resource ids never share a key; the escape
// is undone by reading each "_XX" back.
func TestSegmentIsInjective(t *testing.T) {
	unescape := func(s string) string {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			if s[i] == '_' {
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					t.Fatalf("segment %q: %v", s, err)
				}
				b.WriteByte(byte(v))
				i += 2
				continue
			}
			b.WriteByte(s[i])
		}
		return b.String()
	}
	alphabet := []byte("aZ09.-_/:%| \x00\xff")
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[string]string{}
	for range 20000 {
		in := make([]byte, r.IntN(6)+1)
		for i := range in {
			in[i] = alphabet[r.IntN(len(alphabet))]
		}
		s := string(in)
		out, err := segment("resourceId", s)
		if err != nil {
			t.Fatal(err)
		}
		if got := unescape(out); got != s {
			t.Fatalf("segment(%q) = %q, which reads back as %q", s, out, got)
		}
		if prev, ok := seen[out]; ok && prev != s {
			t.Fatalf("%q and %q both escape to %q", prev, s, out)
		}
		seen[out] = s
		if err := checkSegmentChars(out); err != "" {
			t.Fatalf("segment(%q) = %q: %s", s, out, err)
		}
	}
}

func checkSegmentChars(s string) string {
	if s == "." || s == ".." || s == "" {
		return "not a valid key segment"
	}
	for _, c := range []byte(s) {
		allowed := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_'
		if !allowed {
			return "holds " + strconv.QuoteRune(rune(c))
		}
	}
	return ""
}

func TestParseStore(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Store
	}{
		{"lockstore", Store{Name: "lockstore", Prefix: "dapr", KeyPrefix: KeyPrefixAppID}},
		{"name=orders", Store{Name: "orders", Prefix: "dapr", KeyPrefix: KeyPrefixAppID}},
		{"name=orders,prefix=team-a/locks,keyPrefix=NAME", Store{Name: "orders", Prefix: "team-a/locks", KeyPrefix: KeyPrefixName}},
		{"name=orders,keyprefix=none", Store{Name: "orders", Prefix: "dapr", KeyPrefix: KeyPrefixNone}},
		{"name=orders,keyPrefix=Shared", Store{Name: "orders", Prefix: "dapr", KeyPrefix: "Shared"}},
	} {
		got, err := ParseStore(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseStore(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if again, err := ParseStore(got.String()); err != nil || again != got {
			t.Errorf("ParseStore(%q.String()) = %+v, %v", tt.in, again, err)
		}
	}
	for _, tt := range []struct{ in, want string }{
		{"", "a store's name is empty"},
		{"name=", "a store's name is empty"},
		{"prefix=x", "no name"},
		{"name=a,bogus=1", `unknown field "bogus"`},
		{"name=a,name=b", "name is given twice"},
		{"name=a,oops", "is not key=value"},
		{"name=a,prefix=a//b", "prefix: invalid key"},
		{"name=a,prefix=1/2/3/4/5/6/7", "at most 6 leave room"},
		{"name=a/b", "may not hold '/'"},
		{"name=a,keyPrefix=x||y", "may not contain"},
		{"name=a,keyPrefix=", "keyPrefix is empty"},
	} {
		if _, err := ParseStore(tt.in); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseStore(%q): %v; want an error saying %q", tt.in, err, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "no lock store"},
		{Config{Stores: append(DefaultStores(), DefaultStores()...)}, `store "lockstore" is given twice`},
		{Config{Stores: DefaultStores(), AppID: "a||b"}, "may not contain"},
		{Config{Stores: DefaultStores(), AppID: strings.Repeat("a", 129)}, "app id is 129 bytes"},
	} {
		if err := tt.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v; want an error saying %q", tt.cfg, err, tt.want)
		}
	}
}
