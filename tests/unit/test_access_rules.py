"""Access: grants decide by path components, roles decide writes."""

import pytest

from psirag_kb.access import OWNER, Access, covers


def test_owner_reads_and_writes_everything():
    assert OWNER.everything and OWNER.may_read("/any/where") and OWNER.may_write("/x")


def test_grants_contain_by_components_not_prefix():
    a = Access("ann", "reader", ("/kb/hr/",))
    assert a.grants == ("/kb/hr",)
    assert a.may_read("/kb/hr") and a.may_read("/kb/hr/pay.md")
    assert not a.may_read("/kb/hr-old/pay.md") and not a.may_read("/kb")
    assert not a.may_write("/kb/hr/pay.md")


def test_no_grant_reads_nothing():
    a = Access("bob", "reader", ())
    assert not a.everything and not a.may_read("/kb/a.md") and a.within(("/kb",)) == ()


def test_editor_writes_inside_grants_admin_anywhere():
    e = Access("eve", "editor", ("/kb/docs",))
    assert e.may_write("/kb/docs/a.md") and not e.may_write("/kb/hr/a.md")
    assert Access("root", "admin", ()).may_write("/kb/hr/a.md")


def test_within_intersects_asked_paths_with_grants():
    a = Access("ann", "reader", ("/kb/hr", "/kb/docs/public"))
    assert a.within(("/kb/hr/2024",)) == ("/kb/hr/2024",)
    assert a.within(("/kb",)) == ("/kb/hr", "/kb/docs/public")
    assert a.within(("/kb/finance",)) == ()
    assert covers("/", "/kb/a.md")


def test_unknown_role_and_relative_grants_are_refused():
    with pytest.raises(ValueError):
        Access("x", "owner")
    with pytest.raises(ValueError, match="absolute"):
        Access("x", "reader", ("docs/hr",))
