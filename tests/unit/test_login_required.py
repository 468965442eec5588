import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url", ["/", "/experiments/new/", "/runs/1/"])
def test_pages_redirect_anonymous_users_to_login(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith("/login/")


def test_login_page_and_static_files_are_public(client):
    assert client.get("/login/").status_code == 200


def test_logged_in_user_sees_the_runs_page(client, alice):
    client.force_login(alice)
    assert client.get("/").status_code == 200


def test_form_shows_config_errors_next_to_the_field(client, alice):
    client.force_login(alice)
    response = client.post(
        "/experiments/new/", {"name": "exp", "project": "p", "config_yaml": "algorithm: {objective: nope}\n"}
    )
    assert response.status_code == 200
    assert b'data-field="config_yaml"' in response.content
    assert b"algorithm.objective" in response.content
